// Package http1 is the gateway's HTTP/1.1 engine: a server loop (Server)
// for the plain calls that make up almost all of an API's traffic, which
// hands every other connection to net/http's server, and a client
// (Client) that forwards calls to one plain-HTTP upstream over keep-alive
// connections of its own. Each takes only what it is sure to handle as
// net/http would, and leaves the rest to net/http (the differential tests
// and fuzz targets compare the two): a parser bug here is turned off with
// the gateway's --http-engine std, which serves every call with net/http
// and httputil.ReverseProxy alone. See docs/gateway.md.
package http1
