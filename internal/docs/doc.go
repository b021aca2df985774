// Package docs holds no code: its test checks that every relative link in
// README.md, bench/BENCHMARKS.md and docs/*.md names a file that exists and, with
// a #fragment, a heading in it.
package docs
