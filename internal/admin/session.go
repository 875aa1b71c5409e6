package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// The console's login: a browser cannot be made to send an Authorization
// header, so POST /console/login trades an admin token for a session
// cookie (SessionCookie): random, HttpOnly (no script reads it), Secure
// (browsers keep it over HTTPS and on loopback only), SameSite=Strict (no
// other site's page makes the browser send it). A request that carries
// the cookie is let in as the token it was made from would be, and only
// when the browser says it comes from the console's own origin
// (Sec-Fetch-Site same-origin or none, and an Origin on a write): the
// guard has already refused every foreign Origin and Host.

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "sluice_session"

// Session bounds.
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 1024 // oldest dropped first beyond this
)

type session struct {
	name    string // the token's name ("" when unnamed)
	expires time.Time
}

// sessions holds the live sessions by the SHA-256 of their cookie value.
type sessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]session
}

func (ss *sessions) create(name string) string {
	var b [32]byte
	rand.Read(b[:])
	v := base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[[sha256.Size]byte]session{}
	}
	if len(ss.m) >= maxSessions {
		var oldest [sha256.Size]byte
		var at time.Time
		for k, s := range ss.m {
			if s.expires.Before(now) {
				delete(ss.m, k)
				continue
			}
			if at.IsZero() || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		if len(ss.m) >= maxSessions {
			delete(ss.m, oldest)
		}
	}
	ss.m[sha256.Sum256([]byte(v))] = session{name: name, expires: now.Add(sessionTTL)}
	return v
}

// check returns the session of r's cookie, if it is live.
func (ss *sessions) check(r *http.Request) (name string, ok bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	k := sha256.Sum256([]byte(c.Value))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[k]
	if !ok || time.Now().After(s.expires) {
		delete(ss.m, k)
		return "", false
	}
	return s.name, true
}

func (ss *sessions) drop(r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		ss.mu.Lock()
		delete(ss.m, sha256.Sum256([]byte(c.Value)))
		ss.mu.Unlock()
	}
}

// fromOwnPage reports whether a request carrying the session cookie comes
// from a page of the console's own origin, as the browser tells: a fetch
// of another site, or of another port of the same host (same-site), says
// so in Sec-Fetch-Site; a write must carry Origin, which the guard has
// checked is the API's own.
func fromOwnPage(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get("Origin") == "" {
		return false
	}
	return true
}

func sessionCookie(v string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: SessionCookie, Value: v, Path: "/", MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}
