package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseGPUs reads "0,1,3" into ordinals.
func parseGPUs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("-gpus %q: %q is not a GPU ordinal", s, f)
		}
		if seen[d] {
			return nil, fmt.Errorf("-gpus %q: GPU %d listed twice", s, d)
		}
		seen[d] = true
		out = append(out, d)
	}
	if err := checkGPUs(out); err != nil {
		return nil, err
	}
	return out, nil
}
