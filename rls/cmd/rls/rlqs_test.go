package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// quotaStream opens an RLQS stream to addr and sends one report of the
// buckets ids in domain d.
func quotaStream(t *testing.T, addr string, ids ...map[string]string) grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse] {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for _, id := range ids {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1})
	}
	if err := st.Send(r); err != nil && err != io.EOF { // EOF: the server ended the stream; Recv says why
		t.Fatal(err)
	}
	return st
}

// -rlqs serves RateLimitQuotaService beside ShouldRateLimit (without it
// the method is unimplemented): a bucket whose limit is 0 a minute is
// assigned DENY_ALL, one no rule limits ALLOW_ALL, each for two of Envoy's
// 5 s reports and a second; on SIGTERM every bucket is pushed a TTL of 0
// and the stream ends UNAVAILABLE, and rls stops without waiting out
// -drain for it.
func TestRLQSFlag(t *testing.T) {
	t.Setenv("LOG_LEVEL", "error")
	addr := startRLS(t, map[string]string{}, true)
	if _, err := quotaStream(t, addr, map[string]string{"k": "v"}).Recv(); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without -rlqs: %v", err)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(zeroConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"-config", dir, "-grpc", grpcAddr, "-http", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			"-redis", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "-rlqs", "-drain", "30s"}, io.Discard)
	}()
	waitListening(t, grpcAddr)
	st := quotaStream(t, grpcAddr, map[string]string{"k": "v"}, map[string]string{"other": "x"})
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := []typev3.RateLimitStrategy_BlanketRule{typev3.RateLimitStrategy_DENY_ALL, typev3.RateLimitStrategy_ALLOW_ALL}
	if len(resp.BucketAction) != 2 {
		t.Fatalf("%d actions for 2 buckets: %v", len(resp.BucketAction), resp)
	}
	for i, a := range resp.BucketAction {
		qa := a.GetQuotaAssignmentAction()
		if qa.GetRateLimitStrategy().GetBlanketRule() != want[i] || qa.GetAssignmentTimeToLive().GetSeconds() != 11 {
			t.Fatalf("action %d: %v; want %v for 11 s", i, a, want[i])
		}
	}
	start := time.Now()
	cancel()
	resp, err = st.Recv()
	if err != nil || len(resp.BucketAction) != 2 {
		t.Fatalf("on shutdown: %v %v", resp, err)
	}
	for _, a := range resp.BucketAction {
		if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive(); ttl == nil || ttl.AsDuration() != 0 {
			t.Fatalf("on shutdown: %v; want a TTL of 0", a)
		}
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the stream ended with %v; want UNAVAILABLE", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("rls took %v to stop", d)
	}
}
