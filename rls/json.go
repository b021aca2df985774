package rls

import (
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request's body: far past any request of the
// most descriptors a gateway sends.
const maxJSONBody = 1 << 20

// JSONHandler answers POST /json as the peer's does, for clients that do
// not speak gRPC (a Lua filter, curl): the body a RateLimitRequest in
// protobuf's JSON form, the answer the RateLimitResponse in it, with 200
// for OK and 429 for OVER_LIMIT:
//
//	curl -d '{"domain": "apis", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}' localhost:8080/json
//
// A body that does not parse (or is over 1 MiB) is 400 with the reason;
// a request the service refuses (no descriptors, no config) 400, and one
// Redis could not decide 503 (the peer answers 400 to both).
func JSONHandler(s *Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req pb.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusBadRequest // no descriptors, no config
			if c := status.Code(err); c == codes.Unavailable || c == codes.Internal {
				code = http.StatusServiceUnavailable // Redis could not decide
			}
			http.Error(w, err.Error(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}
