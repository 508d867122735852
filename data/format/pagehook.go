package format

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
