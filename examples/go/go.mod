module scopecheck-example

go 1.19
