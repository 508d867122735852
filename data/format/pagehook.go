package format

import (
	"image"
	"io"

	pqformat "github.com/parquet-go/parquet-go/format"
)

// OnParquetPage makes a Parquet source call fn for every data page it
// decodes: file, row group, leaf column, and the page's number in its
// chunk (-1 when the row group has no usable offset index). It is for
// tests that count the pages decoded; it returns false when src is not a
// Parquet source.
func OnParquetPage(src Source, fn func(file, rg, leaf, page int)) bool {
	s, ok := src.(*pqSource)
	if ok {
		s.pageRead = fn
	}
	return ok
}

// ParquetUnit says where unit u of a Parquet source lies: its file, row
// group, rows [lo, hi) of the row group, and each slot's leaf column. It
// is for tests that check which pages a read decodes.
func ParquetUnit(src Source, u int) (file, rg int, lo, hi int64, leaves []int) {
	s := src.(*pqSource)
	pu := s.unitList[u]
	for _, c := range s.metas[pu.file].cols {
		leaves = append(leaves, c.leaf)
	}
	return pu.file, pu.rg, pu.lo, pu.hi, leaves
}

// DecodeImage decodes one image file's bytes as a dataset's reader does,
// its declared size checked against MaxImagePixels and the bytes present
// before anything is allocated; Resize lays it into dst as the reader does
// (c channels of h x w bytes). For the fuzz targets of package data.
func DecodeImage(uri string, raw []byte) (image.Image, error) { return decodeImage(uri, raw) }

// Resize is the reader's bilinear resize of img into dst.
func Resize(img image.Image, c, h, w int, dst []byte) { resize(img, c, h, w, dst) }

// MaxImagePixels bounds the pixels of an image a dataset may hold.
const MaxImagePixels = maxImagePixels

// ThriftCheck walks a Thrift compact message's declared lengths and counts
// against the bytes present and the reader's bounds, before parquet-go
// decodes it; it returns the message's length. For tests and fuzz targets.
func ThriftCheck(b []byte) (int, error) { return thriftCheck(b) }

// CheckParquetFooter checks a decoded footer against a file of end bytes,
// as the reader does before it reads a row group.
func CheckParquetFooter(md *pqformat.FileMetaData, end int64) error { return pqCheckMeta(md, end) }

// WalkParquetPages checks a column chunk's page headers, as the reader does
// before it reads the chunk's pages.
func WalkParquetPages(ra io.ReaderAt, md *pqformat.ColumnMetaData, rows int64) error {
	return walkPages(ra, md, rows)
}
