package prometheus

import (
	"strings"
)

// keywords take a parenthesized list of label names, not an expression
// (by (le, pod)), or stand alone (bool, and, offset).
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
}

// aggregations may take their grouping before their parentheses
// (sum by (pod) (x)).
var aggregations = map[string]bool{
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "group": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
}

// Selectors returns the vector selectors of a PromQL expression, each as
// written (name and matchers, no range): in
// `sum by (pod) (rate(x_total{a="b"}[5m])) > 1` that is `x_total{a="b"}`.
// Querying each on its own says whether the series an expression reads
// exist, which its own result cannot: `x > 60` is empty both when x is
// healthy and when x no longer exists. It is a scanner for the
// expressions nodeproxy ships (functions, aggregations with their
// grouping, matchers, ranges, numbers), not a PromQL parser: Prometheus
// parses every expression in the tests that use it.
func Selectors(expr string) []string {
	var out []string
	i, n := 0, len(expr)
	skipSpace := func(j int) int {
		for j < n && (expr[j] == ' ' || expr[j] == '\t' || expr[j] == '\n' || expr[j] == '\r') {
			j++
		}
		return j
	}
	// closing returns the index just past the bracket that closes the one
	// at j, skipping quoted strings.
	closing := func(j int) int {
		open, shut := expr[j], map[byte]byte{'(': ')', '{': '}', '[': ']'}[expr[j]]
		depth := 0
		for ; j < n; j++ {
			switch c := expr[j]; {
			case c == '"' || c == '\'' || c == '`':
				for j++; j < n && expr[j] != c; j++ {
					if expr[j] == '\\' && c != '`' {
						j++
					}
				}
			case c == open:
				depth++
			case c == shut:
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return n
	}
	for i < n {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`': // a string argument (label_replace)
			q := c
			for i++; i < n && expr[i] != q; i++ {
				if expr[i] == '\\' && q != '`' {
					i++
				}
			}
			i++
		case c == '[': // a range or a subquery's range
			i = closing(i)
		case c == '{': // a selector of matchers alone
			end := closing(i)
			out = append(out, expr[i:end])
			i = end
		case c >= '0' && c <= '9' || c == '.':
			for i < n && (isIdent(expr[i]) || expr[i] == '.') {
				if (expr[i] == 'e' || expr[i] == 'E') && i+1 < n && (expr[i+1] == '+' || expr[i+1] == '-') {
					i++
				}
				i++
			}
		case isIdentStart(c):
			start := i
			for i < n && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := skipSpace(i)
			switch {
			case keywords[strings.ToLower(word)]:
				if next < n && expr[next] == '(' && word != "and" && word != "or" && word != "unless" {
					i = closing(next)
				}
			case aggregations[strings.ToLower(word)], next < n && expr[next] == '(': // an aggregation or a function
			case next < n && expr[next] == '{':
				end := closing(next)
				out = append(out, word+expr[next:end])
				i = end
			default:
				out = append(out, word)
			}
		default:
			i++
		}
	}
	return out
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
