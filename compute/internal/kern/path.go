package kern

/*
#include <cblas.h>
#include "fast.h"
*/
import "C"

// Path names the kernels this process runs on this processor: "avx512"
// (packed.c's AVX-512 GEMM and fast.c's AVX-512 loops; the portable C and
// OpenBLAS elsewhere) or "portable" (the portable C loops, SetPortable or no
// AVX-512), followed by OpenBLAS's core (the code it chose for the
// processor, e.g. "Haswell" for AVX2, "SkylakeX" for AVX-512).
func Path() string {
	p := "portable"
	if C.tt_has_avx512() != 0 {
		p = "avx512"
	}
	return p + " + OpenBLAS " + C.GoString(C.openblas_get_corename())
}
