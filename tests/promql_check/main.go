// promql-check parses PromQL with Prometheus' own parser (github.com/prometheus/prometheus
// promql/parser, the one Prometheus evaluates queries with) and says which expressions fail.
//
// Input on stdin: a JSON array of expressions. Output on stdout: a JSON array of the same length,
// "" for an expression that parses, else the parser's error. Built and run by tests/promql.py.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promql-check: stdin is not a JSON array of strings:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	errs := make([]string, len(exprs))
	for i, e := range exprs {
		if _, err := p.ParseExpr(e); err != nil {
			errs[i] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(errs); err != nil {
		os.Exit(2)
	}
}
