// promql-2-44-names prints, one a line, the PromQL functions and aggregation operators of
// Prometheus 2.44, the release Managed Service for Prometheus evaluates PromQL at parity with
// (GMP docs, "PromQL compatibility"). They come from Prometheus' own parser at v0.44.0 (the Go
// module of 2.44.0, pinned in go.mod): the keys of parser.Functions, then every ItemType the
// parser calls an aggregator (lex.go IsAggregator: between aggregatorsStart and aggregatorsEnd
// of generated_parser.y.go), lower-cased as the lexer's keyword table spells them.
package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// itemTypesEnd bounds the scan: goyacc numbers the tokens from 57346 (generated_parser.y.go).
const itemTypesEnd = 1 << 16

func main() {
	names := make([]string, 0, len(parser.Functions)+16)
	for name := range parser.Functions {
		names = append(names, name)
	}
	for i := 0; i < itemTypesEnd; i++ {
		if item := parser.ItemType(i); item.IsAggregator() {
			names = append(names, strings.ToLower(item.String()))
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Println(name)
	}
}
