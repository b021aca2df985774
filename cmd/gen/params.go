package main

import (
	"fmt"
	"strings"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// camel is an argument's name as a Go field: max_burst is maxBurst.
func camel(name string) string {
	parts := strings.Split(name, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// paramsGo is internal/engine/params_gen.go: each family's parsed
// arguments as a struct of named fields, a view of the limit's words the
// table's syntax filled in order.
func paramsGo() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "// %s\n\npackage engine\n", generated)
	words := 0
	for f := range spec.CONC {
		words = max(words, len(spec.Families[f].Args)+1)
	}
	fmt.Fprintf(&b, "\n// maxWords is the most integers one limit parses: its positional arguments\n// and its cost.\nconst maxWords = %d\n", words)
	for f := range spec.CONC {
		fam := &spec.Families[f]
		var names, words, fields []string
		for i, a := range append(fam.Args[:len(fam.Args):len(fam.Args)], fam.Cost) {
			names = append(names, camel(a.Name))
			words = append(words, a.Name)
			fields = append(fields, fmt.Sprintf("l.v[%d]", i))
		}
		typ := fam.Kind + "Args"
		fmt.Fprintf(&b, "\n// %s are %s's arguments after the key: %s.\ntype %s struct{ %s int64 }\n",
			typ, fam.Name, strings.Join(words, " "), typ, strings.Join(names, ", "))
		fmt.Fprintf(&b, "\n// %s views l's parsed arguments as %s's.\nfunc (l *limit) %s() %s { return %s{%s} }\n",
			fam.Kind, fam.Name, fam.Kind, typ, typ, strings.Join(fields, ", "))
	}
	return []byte(b.String())
}
