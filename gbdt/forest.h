// Tree ensemble prediction (forest.go).
#include <stdint.h>

// A node of a laid-out tree. Internal nodes: a row goes to left when its
// feature (feat's low 31 bits) is < cond, to left + 1 when it is not, and,
// when it is missing (NaN), to left if feat's top bit (default left) is set.
// Leaves hold their value and go to themselves: left = own index - 1,
// cond NaN (so every row goes "right"), feat 0. So a node is a leaf when
// left < its own index, an internal node's children coming after it.
typedef struct {
	int32_t left;
	uint32_t feat;
	float cond;
	float value;
} gb_fnode;

void gb_forest_add(const float *x, long n, long nf, const gb_fnode *nodes, const int64_t *root, const int32_t *depth,
                   const int32_t *group, long ntrees, long ngroup, long block, long lockstep, float *out);
