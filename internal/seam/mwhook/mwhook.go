// Package mwhook lets sluice's own commands watch the decisions of package
// middleware (the gateway's console: its rates and top list) without
// middleware exporting a way to: package middleware sets Observe when it
// is initialised.
package mwhook

import "github.com/sluicehq/sluice/limiter"

// Observe returns a middleware.Option (as any: this package cannot name
// it) that tells fn every decision the middleware makes, with the call
// decided, on the request's goroutine after the decision; fn must be
// cheap. Both are copies, so that a middleware without the option does
// not move them to the heap.
var Observe func(fn func(d limiter.Decision, req limiter.Request)) any
