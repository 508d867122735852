package format

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrFormat is wrapped by every error about a malformed IDX file. It is an
// ErrInvalid too (errors.Is(err, ErrInvalid)).
var ErrFormat error = formatSentinel{}

// IDX is the content of an IDX file of unsigned bytes: Dims[0] items of
// Dims[1:] each.
type IDX struct {
	Dims []int
	Data []byte
}

// idxUbyte is the IDX type code of unsigned bytes.
const idxUbyte = 0x08

// maxIDXBytes bounds what a header may claim, so a corrupt header cannot
// make the reader allocate without limit.
const maxIDXBytes = 1 << 32

// ReadIDX reads an IDX file of unsigned bytes with dims dimensions (3 for
// images, 1 for labels). A file starting with the gzip magic is
// decompressed.
func ReadIDX(path string, dims int) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read IDX: %w", err)
	}
	defer f.Close()
	idx, err := decodeIDX(f, dims)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return idx, nil
}

func decodeIDX(r io.Reader, dims int) (*IDX, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip header: %v", ErrFormat, err)
		}
		defer zr.Close()
		src = zr
	}
	var magic [4]byte
	if _, err := io.ReadFull(src, magic[:]); err != nil {
		return nil, fmt.Errorf("%w: magic: %s", ErrFormat, short(err, 4))
	}
	want := [4]byte{0, 0, idxUbyte, byte(dims)}
	if magic != want {
		return nil, fmt.Errorf("%w: magic 0x%08x, want 0x%08x (unsigned bytes, %d dimensions)",
			ErrFormat, binary.BigEndian.Uint32(magic[:]), binary.BigEndian.Uint32(want[:]), dims)
	}
	hdr := make([]byte, 4*dims)
	if _, err := io.ReadFull(src, hdr); err != nil {
		return nil, fmt.Errorf("%w: dimensions: %s", ErrFormat, short(err, len(hdr)))
	}
	idx := &IDX{Dims: make([]int, dims)}
	total := 1
	for i := range idx.Dims {
		idx.Dims[i] = int(binary.BigEndian.Uint32(hdr[4*i:]))
		total *= idx.Dims[i]
		if total > maxIDXBytes {
			return nil, fmt.Errorf("%w: dimensions %v claim more than %d bytes", ErrFormat, idx.Dims[:i+1], maxIDXBytes)
		}
	}
	idx.Data = make([]byte, total)
	n, err := io.ReadFull(src, idx.Data)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: data: truncated: dimensions %v need %d bytes, file has %d", ErrFormat, idx.Dims, total, n)
	case err != nil:
		return nil, fmt.Errorf("%w: data: %v", ErrFormat, err)
	}
	// Reading on to the end makes gzip check its CRC and length trailer, and
	// finds bytes the header does not account for.
	var extra [1]byte
	switch n, err := io.ReadFull(src, extra[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: data: longer than dimensions %v say (%d bytes)", ErrFormat, idx.Dims, total)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: gzip stream truncated after the data", ErrFormat)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: after the data: %v", ErrFormat, err)
	}
	return idx, nil
}

func short(err error, want int) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("truncated: file ends before %d bytes", want)
	}
	return err.Error()
}
