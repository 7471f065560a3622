// Package lint pins the linters CI runs, in a module of their own so that
// the library's go.mod never depends on them.
package lint
