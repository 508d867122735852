package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// MarshalJSON writes metrics as a JSON object. NaN and ±Inf, which JSON
// numbers cannot hold and which a diverging loss produces, are written as
// the strings "NaN", "+Inf" and "-Inf".
func (m Metrics) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch {
		case math.IsNaN(v), math.IsInf(v, 0):
			out[k] = strconv.FormatFloat(v, 'g', -1, 64)
		default:
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Metrics) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*m = nil
		return nil
	}
	out := make(Metrics, len(raw))
	for k, v := range raw {
		switch x := v.(type) {
		case float64:
			out[k] = x
		case string:
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return fmt.Errorf("metric %q: %q is not a number", k, x)
			}
			out[k] = f
		default:
			return fmt.Errorf("metric %q: %v is not a number", k, v)
		}
	}
	*m = out
	return nil
}
