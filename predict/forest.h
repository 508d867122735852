// Tree ensemble prediction for package predict (forest.go).
#include <stdint.h>

// A node of a compiled tree. Internal nodes: a row goes to left when its
// feature (feat's low 31 bits) is < cond, to left + 1 when it is not, and,
// when it is missing (NaN), to left if feat's top bit (default left) is set.
// Leaves hold their value and go to themselves: left = own index - 1,
// cond NaN (so every row goes "right"), feat 0.
typedef struct {
	int32_t left;
	uint32_t feat;
	float cond;
	float value;
} tp_node;

void tp_predict(const float *x, long n, long nf, const tp_node *nodes, const int64_t *root, const int32_t *depth,
                const int32_t *group, long ntrees, long ngroup, long block, float *out);
