// Package clientcall lets sluice's admin client (internal/adminclient) send
// its requests through a client.Client — its base URL, token, HTTP client
// and error type — without the admin API's methods being part of package
// client's API. Package client sets Do in its init; every program that
// imports internal/adminclient imports client too, so finds it set.
package clientcall

import (
	"context"
	"net/http"
)

// Do sends a request through c, a *client.Client, with in (when not nil)
// as its JSON body, and decodes a 2xx JSON answer into out (when not nil).
// It returns the answer's headers; a non-2xx answer is a *client.Error.
var Do func(c any, ctx context.Context, method, path string, in, out any) (http.Header, error)
