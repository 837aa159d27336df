package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// The log subresource passes a stored log's gzip object through as it lies in the store when
// the client accepts gzip: the store's bytes go out untouched, a third of the log's size, and
// neither this server nor the aggregator spends CPU on them (the client decompresses, as it would
// reading the store itself). k8s.io/apiserver's rest.ResourceStreamer can set the content type
// of a stream but no other header, and its REST handlers do not hand the request's headers to the
// storage, so a filter innermost in the handler chain puts both into the request's context: what
// the client accepts, and the response's header, which the stream sets before its first byte.

// responseEncodingKey keys the request's encoding in its context.
type responseEncodingKey struct{}

// responseEncoding is what the log subresource needs of the HTTP exchange.
type responseEncoding struct {
	// gzip: the client accepts gzip and reads the response as is (not through a WebSocket,
	// whose frames carry the stream without its HTTP headers).
	gzip bool
	// header is the response's header: set before the response starts, it goes out with it.
	header http.Header
}

// buildHandlerChain is k8s.io/apiserver's default chain (authentication, authorization, audit, …)
// around the API handler, with withResponseEncoding innermost: it sees the response writer the
// REST handlers write to.
func buildHandlerChain(api http.Handler, c *genericapiserver.Config) http.Handler {
	return genericapiserver.DefaultBuildHandlerChain(withResponseEncoding(api), c)
}

// withResponseEncoding puts the request's responseEncoding into its context.
func withResponseEncoding(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enc := &responseEncoding{header: w.Header()}
		enc.gzip = !wsstream.IsWebSocketRequest(r) && acceptsGzip(r.Header.Values("Accept-Encoding"))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), responseEncodingKey{}, enc)))
	})
}

// responseEncodingFrom returns the request's responseEncoding; without one (a request that did
// not come through the chain) the client gets plain bytes and headers go nowhere.
func responseEncodingFrom(ctx context.Context) *responseEncoding {
	if enc, ok := ctx.Value(responseEncodingKey{}).(*responseEncoding); ok {
		return enc
	}
	return &responseEncoding{header: http.Header{}}
}

// acceptsGzip reports whether Accept-Encoding values accept gzip (RFC 9110 12.5.3): "gzip" or
// "x-gzip" with a quality above 0. A wildcard is not taken as gzip: a client that names no
// coding gets the bytes it surely reads.
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for _, coding := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(coding, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if (name == "gzip" || name == "x-gzip") && quality(params) > 0 {
				return true
			}
		}
	}
	return false
}

// quality is the q parameter of a coding's parameters (1 when absent, 0 when malformed).
func quality(params string) float64 {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || strings.ToLower(strings.TrimSpace(k)) != "q" {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || q < 0 || q > 1 {
			return 0
		}
		return q
	}
	return 1
}
