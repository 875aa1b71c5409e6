// Package everyresult marks a context so that a store answers a take with
// a result of its own for every op: a local shortcut that would fill the
// ops it did not evaluate with a stand-in (the Redis store's denial cache
// answers one denial and reports the others as allowing without reading
// them; a lease answers from tokens held here) must not answer.
// limiter.CheckMany marks the takes of several requests with it: each
// request's decision is then its buckets' own. It is a contract between
// sluice's limiter and its stores, not part of the limiter.Store API.
package everyresult

import "context"

// key is the context key of the mark.
type key struct{}

// With returns ctx marked.
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, true)
}

// Wanted reports whether ctx is marked by With.
func Wanted(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
