package storage

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL of <linux/fs.h>: no one, root included,
// may create files in a directory that carries it.
const fsImmutableFL = 0x10

// readOnlyDir returns a directory this process cannot write to. Mode 0555
// stops an ordinary user; root ignores modes, so as root the directory is
// also made immutable (CAP_LINUX_IMMUTABLE, ext4/xfs/btrfs).
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	if writable(dir) {
		setImmutable(t, dir, true)
		t.Cleanup(func() { setImmutable(t, dir, false) })
	}
	if writable(dir) {
		t.Skipf("cannot make %s read-only for uid %d (no CAP_LINUX_IMMUTABLE?)", dir, os.Geteuid())
	}
	return dir
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, "probe-")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

func setImmutable(t *testing.T, dir string, on bool) {
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Logf("get flags of %s: %v", dir, err)
		return
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		t.Logf("set flags of %s: %v", dir, err)
	}
}
