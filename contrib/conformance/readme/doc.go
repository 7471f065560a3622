// Package readme is where the README's Go snippets are compiled: the test
// in contrib/conformance writes each snippet into this package through the
// go command's -overlay, beside given.go, and vets it. Nothing here is
// meant to be imported.
package readme
