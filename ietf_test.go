package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

func TestIETFItems(t *testing.T) {
	for got, want := range map[string]string{
		PolicyItem("per-ip", 10, time.Minute):             `"per-ip";q=10;w=60`,
		PolicyItem("tb", 100, 10500*time.Millisecond):     `"tb";q=100;w=11`,
		PolicyItem("huge", 1<<53-1, time.Duration(1<<62)): `"huge";q=999999999999999;w=4611686019`,
		ConcurrencyPolicyItem("exports", 4):               `"exports";q=4;qu="concurrent-requests"`,
		StateItem("per-ip", 9, 59500*time.Millisecond):    `"per-ip";r=9;t=60`,
		StateItem(`a "b"`, -3, -time.Second):              `"a \"b\"";r=0;t=0`,
		StateItem("x", 1e16, time.Duration(1<<62)):        `"x";r=999999999999999;t=4611686019`,
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

// A response under a per-IP limit of 10 a minute, 9 left, full again in
// 59.5 s, writes these two fields.
func ExamplePolicyItem() {
	fmt.Println("RateLimit-Policy: " + PolicyItem("per-ip", 10, time.Minute))
	fmt.Println("RateLimit: " + StateItem("per-ip", 9, 59500*time.Millisecond))
	// Output:
	// RateLimit-Policy: "per-ip";q=10;w=60
	// RateLimit: "per-ip";r=9;t=60
}
