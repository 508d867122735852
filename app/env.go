package app

import "os"

// EnvOr returns the value of the environment variable key, or def when it is
// unset or empty. The commands use it for flag defaults that the environment
// may set (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE); a flag given on the
// command line still wins.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
