//go:build linux

package collective

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const shmSupported = true

// hostID identifies this kernel and host: ranks whose identities differ
// never try shared memory. Empty when the boot id cannot be read.
var hostID = sync.OnceValue(func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	name, _ := os.Hostname()
	return strings.TrimSpace(string(boot)) + "/" + name
})

// shmDirs are where regions may live: /dev/shm (tmpfs), else the temporary
// directory. An acceptor opens only paths in these.
func shmDirs() []string {
	return []string{"/dev/shm", filepath.Clean(os.TempDir())}
}

// createShm creates, sizes and maps a region of shmSlots slots of slotBytes,
// and returns it with the offer that tells the neighbour where it is. The
// caller unlinks offer.path once the neighbour has answered.
func createShm(slotBytes int) (*shmLink, *shmOffer, error) {
	sweepDead()
	stride, size := shmGeometry(shmSlots, slotBytes)
	if size > shmMaxRegion || stride <= 0 {
		return nil, nil, fmt.Errorf("segment of %d bytes: region of %d bytes over %d", slotBytes, size, shmMaxRegion)
	}
	o := &shmOffer{host: hostID(), slots: shmSlots, slotBytes: uint32(slotBytes)}
	if o.host == "" {
		return nil, nil, errors.New("no host identity (/proc/sys/kernel/random/boot_id)")
	}
	_, _ = rand.Read(o.nonce[:])
	var errs []error
	for _, dir := range shmDirs() {
		path := regionName(dir)
		mem, err := createRegion(path, size)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.path = path
		l := &shmLink{}
		l.attach(mem, shmSlots, slotBytes)
		l.ctl.magic, l.ctl.nonce = shmMagic, o.nonce
		l.ctl.slots, l.ctl.slotBytes = o.slots, o.slotBytes
		return l, o, nil
	}
	return nil, nil, errors.Join(errs...)
}

// createRegion creates path (exclusively, for this user only), reserves size
// bytes and maps them. Reserving with fallocate makes a full tmpfs fail here,
// not with SIGBUS at the first touch of a page.
func createRegion(path string, size int) (mem []byte, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		_ = unix.Close(fd)
		if err != nil {
			_ = unix.Unlink(path)
		}
	}()
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil {
		return nil, fmt.Errorf("reserve %d bytes in %s: %w", size, path, err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// openShm maps the region a dialer offered, checks it is that dialer's
// (nonce, geometry) and unlinks it: from now on only the two mappings hold
// it, and the kernel frees it when both processes are gone.
func openShm(o *shmOffer, segment int) (*shmLink, error) {
	if int(o.slotBytes) != segment || o.slots == 0 || o.slots > 64 {
		return nil, fmt.Errorf("offer of %d slots of %d bytes, segment %d", o.slots, o.slotBytes, segment)
	}
	stride, size := shmGeometry(int(o.slots), int(o.slotBytes))
	if size > shmMaxRegion || stride <= 0 {
		return nil, fmt.Errorf("region of %d bytes over %d", size, shmMaxRegion)
	}
	mem, err := openRegion(o.path, size)
	if err != nil {
		return nil, err
	}
	l := &shmLink{}
	l.attach(mem, int(o.slots), int(o.slotBytes))
	if l.ctl.magic != shmMagic || l.ctl.nonce != o.nonce || l.ctl.slots != o.slots || l.ctl.slotBytes != o.slotBytes {
		shmUnmap(mem)
		return nil, fmt.Errorf("%s: header does not match the offer (another host's file of the same name?)", o.path)
	}
	_ = unix.Unlink(o.path)
	return l, nil
}

// sweepOnce sweeps, once per process, the regions dead processes left.
var sweepOnce sync.Once

// sweepDead runs sweepDeadRegions on shmDirs once per process, before its
// first region is created.
func sweepDead() { sweepOnce.Do(func() { sweepDeadRegions(shmDirs()) }) }

// sweepDeadRegions unlinks region files of this package in dirs that belong
// to this user and whose creating process (the pid in the name) is gone: a
// process killed between creating a region and its neighbour's answer
// leaves its name behind, and /dev/shm is memory. It returns the paths
// removed. A pid reused by a live process keeps its file (it is skipped,
// never wrongly removed); a file of another user is never touched.
func sweepDeadRegions(dirs []string) []string {
	var removed []string
	uid := uint32(os.Getuid())
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			rest, ok := strings.CutPrefix(name, shmNamePrefix)
			if !ok || !e.Type().IsRegular() {
				continue
			}
			pidStr, _, ok := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidStr)
			if !ok || err != nil || pid <= 0 {
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != uid || processAlive(pid) {
				continue
			}
			path := filepath.Join(dir, name)
			if unix.Unlink(path) == nil {
				removed = append(removed, path)
			}
		}
	}
	return removed
}

// processAlive says whether a process pid exists (kill(pid, 0); EPERM means
// it exists under another user).
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// regionName is a new, unguessable name for a region of this process in dir.
func regionName(dir string) string {
	var salt [8]byte
	_, _ = rand.Read(salt[:])
	return filepath.Join(dir, fmt.Sprintf("%s%d-%s", shmNamePrefix, os.Getpid(), hex.EncodeToString(salt[:])))
}

// openRegion maps the region file path of size bytes that a rank of this
// host created: a regular file of this user, named as this package names
// them, in one of shmDirs.
func openRegion(path string, size int) ([]byte, error) {
	dir, base := filepath.Split(path)
	ok := strings.HasPrefix(base, shmNamePrefix) && !strings.ContainsAny(base, `/\`)
	inDir := false
	for _, d := range shmDirs() {
		inDir = inDir || filepath.Clean(dir) == d
	}
	if !ok || !inDir || filepath.Clean(path) != path {
		return nil, fmt.Errorf("path %q is not a region of this package", path)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(size) || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s: not a %d-byte regular file of this user", path, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// unlinkShm removes a region's name; it is gone already if the neighbour
// mapped it.
func unlinkShm(path string) {
	_ = unix.Unlink(path)
}

func shmUnmap(mem []byte) {
	_ = unix.Munmap(mem)
}
