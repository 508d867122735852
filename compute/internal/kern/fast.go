package kern

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include "fast.h"
*/
import "C"

import "unsafe"

// isF32 reports whether T is float32: the kernels then run in C (fast.c),
// vectorised; float64 stays in Go as the reference.
func isF32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// cf passes a float32 slice to C (nil when empty). Only called when
// isF32[T]().
func cf[T Float](s []T) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func cl(n int) C.long { return C.long(n) }

func cb(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// SetPortable makes the kernels with hand-written AVX-512 paths take their
// portable C paths instead, so that tests cover those on any machine. Not
// safe to call while kernels run.
func SetPortable(on bool) { C.tt_portable = cb(on) }
