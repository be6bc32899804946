// Package auth authenticates workload API callers with TokenReview and
// authorizes each request with SubjectAccessReview, so that the API grants
// exactly what the caller's own RBAC grants, never what its service account
// can do. Both reviews are cached briefly, keyed by a hash of the token or of
// the user and attributes; the token itself is never stored or logged.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capscale/capscale/internal/httpserver"
)

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Attributes is one access check: verb on group/resource[/subresource]
// (name) in namespace.
type Attributes struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
}

// String renders the check the way an RBAC rule reads, e.g.
// "update deployments.apps/scale \"web\" in namespace \"shop\"".
func (a Attributes) String() string {
	res := a.Resource
	if a.Group != "" {
		res += "." + a.Group
	}
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	s := a.Verb + " " + res
	if a.Name != "" {
		s += fmt.Sprintf(" %q", a.Name)
	}
	return s + fmt.Sprintf(" in namespace %q", a.Namespace)
}

// Options configure a Reviewer.
type Options struct {
	// TTL bounds how long a review result is reused. Zero disables caching.
	TTL time.Duration
	// MaxEntries bounds each cache; default 4096.
	MaxEntries int
	// Clock is for tests; default the real clock.
	Clock clock.PassiveClock
}

// Reviewer asks the API server who a token belongs to and what it may do.
type Reviewer struct {
	client kubernetes.Interface
	ttl    time.Duration
	authn  *cache.LRUExpireCache
	authz  *cache.LRUExpireCache
	cacheM *prometheus.CounterVec
}

// NewReviewer registers capscale_workload_auth_cache_requests_total on reg.
func NewReviewer(client kubernetes.Interface, o Options, reg prometheus.Registerer) *Reviewer {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 4096
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	r := &Reviewer{
		client: client,
		ttl:    o.TTL,
		authn:  cache.NewLRUExpireCacheWithClock(o.MaxEntries, o.Clock),
		authz:  cache.NewLRUExpireCacheWithClock(o.MaxEntries, o.Clock),
		cacheM: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "capscale", Subsystem: "workload", Name: "auth_cache_requests_total",
			Help: "Lookups of cached TokenReview (review=authn) and SubjectAccessReview (review=authz) results, by result (hit or miss).",
		}, []string{"review", "result"}),
	}
	reg.MustRegister(r.cacheM)
	return r
}

// ErrUnauthenticated means the token was reviewed and rejected.
var ErrUnauthenticated = errors.New("token is not valid")

type authnResult struct {
	user *User
	err  error
}

// Authenticate reviews a bearer token. It returns ErrUnauthenticated for a
// rejected token and another error when the review itself failed.
func (r *Reviewer) Authenticate(ctx context.Context, token string) (*User, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := r.authn.Get(key); ok {
		r.cacheM.WithLabelValues("authn", "hit").Inc()
		res := v.(authnResult)
		return res.user, res.err
	}
	r.cacheM.WithLabelValues("authn", "miss").Inc()
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		// Not cached: a transient API failure must not lock a caller out.
		return nil, fmt.Errorf("creating TokenReview: %w", err)
	}
	res := authnResult{err: ErrUnauthenticated}
	if tr.Status.Authenticated {
		u := &User{Name: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups}
		if len(tr.Status.User.Extra) > 0 {
			u.Extra = make(map[string][]string, len(tr.Status.User.Extra))
			for k, v := range tr.Status.User.Extra {
				u.Extra[k] = v
			}
		}
		res = authnResult{user: u}
	} else if tr.Status.Error != "" {
		klog.FromContext(ctx).V(2).Info("Token rejected", "reason", tr.Status.Error)
	}
	if r.ttl > 0 {
		r.authn.Add(key, res, r.ttl)
	}
	return res.user, res.err
}

// Decision is the outcome of an access check.
type Decision struct {
	Allowed bool
	// Reason is the authorizer's explanation, if it gave one.
	Reason string
}

// Authorize asks whether u may perform a.
func (r *Reviewer) Authorize(ctx context.Context, u *User, a Attributes) (Decision, error) {
	key := authzKey(u, a)
	if v, ok := r.authz.Get(key); ok {
		r.cacheM.WithLabelValues("authz", "hit").Inc()
		return v.(Decision), nil
	}
	r.cacheM.WithLabelValues("authz", "miss").Inc()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   u.Name,
		UID:    u.UID,
		Groups: u.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: a.Group,
			Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		},
	}}
	if len(u.Extra) > 0 {
		sar.Spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			sar.Spec.Extra[k] = v
		}
	}
	out, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return Decision{}, fmt.Errorf("creating SubjectAccessReview for %s: %w", a, err)
	}
	d := Decision{Allowed: out.Status.Allowed && !out.Status.Denied, Reason: out.Status.Reason}
	if out.Status.EvaluationError != "" && !d.Allowed {
		klog.FromContext(ctx).V(2).Info("SubjectAccessReview evaluation error", "check", a.String(), "err", out.Status.EvaluationError)
	}
	if r.ttl > 0 {
		r.authz.Add(key, d, r.ttl)
	}
	return d, nil
}

// authzKey hashes everything a SubjectAccessReview depends on; sorting makes
// the key independent of group and extra order.
func authzKey(u *User, a Attributes) string {
	h := sha256.New()
	w := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	w(u.Name)
	w(u.UID)
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, g := range groups {
		w(g)
	}
	w("")
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w(k)
		for _, v := range u.Extra[k] {
			w(v)
		}
		w("")
	}
	for _, s := range []string{a.Verb, a.Group, a.Resource, a.Subresource, a.Namespace, a.Name} {
		w(s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

type ctxKey struct{}

// WithUser returns ctx carrying u.
func WithUser(ctx context.Context, u *User) context.Context {
	return context.WithValue(ctx, ctxKey{}, u)
}

// UserFrom returns the authenticated user of a request, or nil.
func UserFrom(ctx context.Context) *User {
	u, _ := ctx.Value(ctxKey{}).(*User)
	return u
}

// Authenticated is middleware that rejects requests without a valid bearer
// token (401) and puts the user in the request context. onUser, if not nil,
// is told the user too (the audit log wraps outside this middleware).
func (r *Reviewer) Authenticated(onUser func(*http.Request, *User)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			token, ok := bearerToken(req)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="capscale"`)
				httpserver.WriteError(w, http.StatusUnauthorized, "a bearer token is required: Authorization: Bearer TOKEN")
				return
			}
			u, err := r.Authenticate(req.Context(), token)
			switch {
			case errors.Is(err, ErrUnauthenticated):
				w.Header().Set("WWW-Authenticate", `Bearer realm="capscale", error="invalid_token"`)
				httpserver.WriteError(w, http.StatusUnauthorized, "the bearer token is not valid")
				return
			case err != nil:
				klog.FromContext(req.Context()).Error(err, "Authenticating request failed")
				httpserver.WriteError(w, http.StatusServiceUnavailable, "authentication is unavailable, retry later")
				return
			}
			if onUser != nil {
				onUser(req, u)
			}
			next.ServeHTTP(w, req.WithContext(WithUser(req.Context(), u)))
		})
	}
}

// Require is middleware that lets a request through only when its user
// (from Authenticated) is allowed every check attrs returns.
func (r *Reviewer) Require(attrs func(*http.Request) []Attributes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u := UserFrom(req.Context())
			if u == nil {
				httpserver.WriteError(w, http.StatusUnauthorized, "a bearer token is required: Authorization: Bearer TOKEN")
				return
			}
			if code, msg := r.Check(req.Context(), u, attrs(req)...); code != http.StatusOK {
				httpserver.WriteError(w, code, msg)
				return
			}
			next.ServeHTTP(w, req)
		})
	}
}

// Check runs every check for u and returns 200, or the status and message
// to answer with: 403 naming the first denied check, or 503 when a review
// could not be made.
func (r *Reviewer) Check(ctx context.Context, u *User, checks ...Attributes) (int, string) {
	for _, a := range checks {
		d, err := r.Authorize(ctx, u, a)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Authorizing request failed", "user", u.Name)
			return http.StatusServiceUnavailable, "authorization is unavailable, retry later"
		}
		if !d.Allowed {
			msg := fmt.Sprintf("user %q cannot %s", u.Name, a)
			if d.Reason != "" {
				msg += ": " + d.Reason
			}
			return http.StatusForbidden, msg
		}
	}
	return http.StatusOK, ""
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
