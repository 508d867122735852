//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// cuBLAS is loaded once per process, at the first New.
var (
	blasOnce sync.Once
	blasErr  error
	blasPath string
)

// blasMajors are the cuBLAS generations tried, newest first: the GPU
// machines have CUDA 13, Debian's toolkit 11.
var blasMajors = []string{"13", "12", "11"}

// blasRoots are searched for libcublas.so.* when the dynamic loader finds
// none by name (PyTorch's wheels keep theirs under site-packages/nvidia).
var blasRoots = []string{"/usr/local", "/opt", "/usr/lib", "/usr/lib64", "/root", "/home"}

// loadCuBLAS loads cuBLAS: the file $TEMPOTRAIN_CUBLAS if set, else
// libcublas.so.13, .12, .11 by name (LD_LIBRARY_PATH, the loader's cache),
// else the newest such file under blasRoots, with the libcublasLt beside
// it loaded first.
func loadCuBLAS() error {
	blasOnce.Do(func() { blasPath, blasErr = openCuBLAS() })
	return blasErr
}

// CuBLASPath is the cuBLAS library in use ("" before the first New).
func CuBLASPath() string { return blasPath }

func openCuBLAS() (string, error) {
	var tried []string
	try := func(path string) bool {
		lt := ""
		if strings.Contains(path, "/") {
			lt = siblingLt(path)
		}
		msg, ok := blasOpen(lt, path)
		if !ok {
			tried = append(tried, msg)
		}
		return ok
	}
	if p := os.Getenv("TEMPOTRAIN_CUBLAS"); p != "" {
		if try(p) {
			return p, nil
		}
		return "", fmt.Errorf("load cuBLAS from TEMPOTRAIN_CUBLAS: %s", tried[0])
	}
	for _, v := range blasMajors {
		if try("libcublas.so." + v) {
			return "libcublas.so." + v, nil
		}
	}
	for _, p := range findCuBLAS(blasRoots) {
		if try(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cuBLAS (libcublas.so.%s) could be loaded: %s; set TEMPOTRAIN_CUBLAS to the library's path",
		strings.Join(blasMajors, ", .so."), strings.Join(tried, "; "))
}

// siblingLt is the libcublasLt of the same version beside a libcublas.
func siblingLt(path string) string {
	dir, base := filepath.Split(path)
	lt := filepath.Join(dir, strings.Replace(base, "libcublas.", "libcublasLt.", 1))
	if _, err := os.Stat(lt); err != nil {
		return ""
	}
	return lt
}

// findCuBLAS lists the libcublas.so.<major> files under roots, newest major
// first.
func findCuBLAS(roots []string) []string {
	rank := map[string]int{}
	for i, v := range blasMajors {
		rank["libcublas.so."+v] = i
	}
	var found []string
	for _, root := range roots {
		filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: skip it
			}
			if e.IsDir() && (path == "/proc" || path == "/sys" || path == "/dev") {
				return filepath.SkipDir
			}
			if _, ok := rank[e.Name()]; ok {
				found = append(found, path)
			}
			return nil
		})
	}
	sort.SliceStable(found, func(i, j int) bool { return rank[filepath.Base(found[i])] < rank[filepath.Base(found[j])] })
	return found
}

// ErrNoDevice says a GPU ordinal does not exist on this machine.
var ErrNoDevice = errors.New("no such GPU")
