package format

import (
	"math"
	"strconv"
	"unsafe"
)

// float64pow10 holds the powers of ten a float64 represents exactly.
var float64pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseFloat32 parses a decimal number from bytes into the float32 nearest
// to it (as strconv.ParseFloat(s, 32) does), without allocating. ok is
// false when s is not a number or overflows float32 ("inf" and "nan" are
// numbers).
//
// Numbers of at most 19 significant digits whose decimal exponent is small
// take Clinger's fast path: the mantissa and the power of ten are exact
// float64s, so one multiplication or division rounds correctly to float64.
// Rounding that float64 to float32 is then correct too, except when it
// lies exactly halfway between two float32s (the true value may lie on
// either side): those, subnormals, and everything else go to strconv.
func parseFloat32(s []byte) (float32, bool) {
	i, n := 0, len(s)
	if n == 0 {
		return 0, false
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		i++
	}
	// The integer part, then the fraction: every digit goes into mant; more
	// than 19 of them could overflow it (leading zeros too: rare), so they
	// go to strconv.
	var mant uint64
	start := i
	for i < n && s[i]-'0' < 10 {
		mant = mant*10 + uint64(s[i]-'0')
		i++
	}
	digits := i - start
	exp := 0
	if i < n && s[i] == '.' {
		i++
		frac := i
		for i < n && s[i]-'0' < 10 {
			mant = mant*10 + uint64(s[i]-'0')
			i++
		}
		exp = frac - i
		digits += i - frac
	}
	if digits == 0 {
		return parseFloat32Slow(s)
	}
	if digits > 19 {
		return parseFloat32Slow(s)
	}
	if i < n {
		if s[i] != 'e' && s[i] != 'E' {
			return parseFloat32Slow(s)
		}
		i++
		eneg := false
		if i < n && (s[i] == '-' || s[i] == '+') {
			eneg = s[i] == '-'
			i++
		}
		if i == n {
			return 0, false
		}
		e := 0
		for ; i < n; i++ {
			d := s[i] - '0'
			if d >= 10 {
				return parseFloat32Slow(s)
			}
			if e < 10000 {
				e = e*10 + int(d)
			}
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if mant == 0 {
		if neg {
			return float32(math.Copysign(0, -1)), true
		}
		return 0, true
	}
	if mant > 1<<53 || exp < -22 || exp > 22 {
		return parseFloat32Slow(s)
	}
	f := float64(mant)
	if exp < 0 {
		f /= float64pow10[-exp]
	} else {
		f *= float64pow10[exp]
	}
	// Halfway between two float32s, or outside float32's normal range:
	// let strconv decide.
	bits := math.Float64bits(f)
	if bits&(1<<29-1) == 1<<28 || f < 0x1p-126 || f > math.MaxFloat32 {
		return parseFloat32Slow(s)
	}
	if neg {
		f = -f
	}
	return float32(f), true
}

func parseFloat32Slow(s []byte) (float32, bool) {
	if len(s) == 0 {
		return 0, false
	}
	// The string does not escape: strconv copies what it keeps for errors.
	f, err := strconv.ParseFloat(unsafe.String(&s[0], len(s)), 32)
	if err != nil {
		return 0, false
	}
	return float32(f), true
}
