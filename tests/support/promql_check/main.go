// promql-check parses PromQL with Prometheus' own parser (github.com/prometheus/prometheus
// promql/parser, the one Prometheus evaluates queries with) and says which expressions fail.
//
// Input on stdin: a JSON array of expressions. Output on stdout: a JSON array of the same length,
// "" for an expression that parses, else the parser's error. Built and run by tests/support/promql.py.
//
// With -config, stdin is a Prometheus configuration (YAML) instead, loaded with Prometheus' own
// config.Load, as the Ops Agent's Prometheus receiver loads its `config:` (ops-agent
// confgenerator/prometheus.go unmarshals it into promconfig.Config); the output is its error or "".
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-config" {
		body, err := io.ReadAll(os.Stdin)
		if err != nil {
			os.Exit(2)
		}
		message := ""
		if _, err := config.Load(string(body), slog.New(slog.DiscardHandler)); err != nil {
			message = err.Error()
		}
		_ = json.NewEncoder(os.Stdout).Encode(message)
		return
	}
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
