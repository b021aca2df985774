package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const example = `
domain: apis
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: path
    value: /login*
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window, name: login}
  - key: path
    value: /v1/*/items
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: user
    descriptors:
      - key: tier
        value: free
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 1000, algorithm: token_bucket}
      - key: tier
        value: gold
        rate_limit: {unlimited: true}
      - key: tier
        value: trial
        shadow_mode: true
        rate_limit:
          unit: hour
          requests_per_unit: 0
          name: trial
          replaces: [{name: login}]
`

func descriptor(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func mustParse(t *testing.T, files map[string]string) *Config {
	t.Helper()
	in := map[string][]byte{}
	for k, v := range files {
		in[k] = []byte(v)
	}
	c, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLookup is the peer's matching, step by step: key_value first, then
// the wildcards in file order, then the key alone; a rule only at the
// request's last entry.
func TestLookup(t *testing.T) {
	c := mustParse(t, map[string]string{"apis.yaml": example})
	for _, tc := range []struct {
		d         *rlv3.RateLimitDescriptor
		domain    string
		stat      string // "" when no rule
		perUnit   int64
		unit      time.Duration
		algorithm Algorithm
	}{
		{descriptor("remote_address", "1.2.3.4"), "apis", "apis.remote_address", 3, time.Second, FixedWindow},
		{descriptor("remote_address", "10.0.0.1"), "apis", "apis.remote_address_10.0.0.1", 100, time.Minute, GCRA},
		{descriptor("path", "/login"), "apis", "apis.path_/login*", 5, time.Minute, SlidingWindow},
		{descriptor("path", "/login/sso"), "apis", "apis.path_/login*", 5, time.Minute, SlidingWindow},
		{descriptor("path", "/logout"), "apis", "", 0, 0, ""},
		{descriptor("path", "/v1/abc/items"), "apis", "apis.path_/v1/*/items", 7, time.Hour, FixedWindow},
		{descriptor("path", "/v1/items"), "apis", "", 0, 0, ""}, // the '*' sits between two slashes
		{descriptor("user", "u1"), "apis", "", 0, 0, ""},        // no rule at this level
		{descriptor("user", "u1", "tier", "free"), "apis", "apis.user_u1.tier_free", 1000, 24 * time.Hour, TokenBucket},
		{descriptor("user", "u1", "tier", "free", "x", "y"), "apis", "", 0, 0, ""}, // deeper than the config
		{descriptor("remote_address", "1.2.3.4", "x", "y"), "apis", "", 0, 0, ""},  // a rule before the last entry does not count
		{descriptor("remote_address", "1.2.3.4"), "other", "", 0, 0, ""},
		{descriptor("nothing", "here"), "apis", "", 0, 0, ""},
	} {
		r, stat := c.lookup(tc.domain, tc.d)
		if tc.stat == "" {
			if r != nil {
				t.Errorf("%v in %s: got %s, want no rule", tc.d.Entries, tc.domain, r.statKey)
			}
			continue
		}
		if r == nil {
			t.Errorf("%v: no rule, want %s", tc.d.Entries, tc.stat)
			continue
		}
		if stat != tc.stat || r.perUnit != tc.perUnit || r.unit != tc.unit || r.algorithm != tc.algorithm {
			t.Errorf("%v: got %s %d per %v %s, want %s %d per %v %s", tc.d.Entries, stat, r.perUnit, r.unit, r.algorithm, tc.stat, tc.perUnit, tc.unit, tc.algorithm)
		}
	}
	gold, _ := c.lookup("apis", descriptor("user", "u", "tier", "gold"))
	trial, _ := c.lookup("apis", descriptor("user", "u", "tier", "trial"))
	if gold == nil || !gold.unlimited || trial == nil || !trial.shadow || trial.perUnit != 0 || trial.replaces[0] != "login" || trial.name != "trial" {
		t.Fatalf("gold %+v, trial %+v", gold, trial)
	}
	if trial.proto.Unit != pb.RateLimitResponse_RateLimit_HOUR || trial.proto.Name != "trial" {
		t.Fatalf("trial's current_limit %v", trial.proto)
	}
}

// TestConfigErrors: the peer's rules, each error naming the file, and the
// line and key at fault.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"empty domain", "descriptors: []", "a.yaml: config file cannot have empty domain"},
		{"empty file", "", "a.yaml: config file cannot have empty domain"},
		{"not yaml", "domain: [", "a.yaml: error loading config file"},
		{"unknown root key", "domain: d\nfoo: 1", "a.yaml:2: config error, unknown key 'foo' in the file"},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: k\n    valeu: v", "a.yaml:4: config error, unknown key 'valeu' in a descriptor"},
		{"unknown rate_limit key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}", "a.yaml:4: config error, unknown key 'burst' in rate_limit of 'd.k'"},
		{"share without a wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true", "a.yaml:3: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"},
		{"quota_mode without a limit", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true", "a.yaml:3: quota_mode and metadata on 'd.k', which has no rate_limit"},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: k\n    metadata: [1]\n    rate_limit: {unit: second, requests_per_unit: 1}", "a.yaml:4: config error, 'metadata' must be a mapping"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v", "a.yaml:3: descriptor has empty key"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n  - key: k", "a.yaml:4: duplicate descriptor composite key 'd.k'"},
		{"duplicate key_value", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}", "a.yaml:4: duplicate descriptor composite key 'd.k_v'"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", "a.yaml:4: invalid rate limit unit 'fortnight' for 'd.k'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}", "a.yaml:4: invalid rate limit unit '' for 'd.k'"},
		{"unit when unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}", "a.yaml:4: should not specify rate limit unit when unlimited ('d.k')"},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}", "a.yaml:4: config error, 'requests_per_unit' of 'd.k': cannot read \"-1\" as a whole number from 0 to 4294967295"},
		{"flag not a bool", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    shadow_mode: maybe", "a.yaml:5: config error, 'shadow_mode' of 'd.k_v': cannot read \"maybe\" as true or false"},
		{"key not a scalar", "domain: d\ndescriptors:\n  - key: [k]", "a.yaml:3: config error, 'key' must be a single value"},
		{"replaces name not a scalar", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: [n]}]}", "a.yaml:4: config error, 'name' of 'd.k' must be a single value"},
		{"too big", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}", "cannot read \"4294967296\""},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}", "a.yaml:4: unknown algorithm 'leaky' for 'd.k'"},
		{"log too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100001, algorithm: sliding_log}", "requests_per_unit 100001 for 'd.k' is past the sliding log's 100000"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}", "should not have an empty replaces entry ('d.k')"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}", "replaces should not contain name of same descriptor ('d.k')"},
		{"list of scalars", "domain: d\ndescriptors: [k]", "a.yaml:2: a descriptor must be a mapping"},
		{"key twice", "domain: d\ndescriptors:\n  - key: k\n    key: j", "a.yaml:4: config error, key 'key' given twice in a descriptor"},
		{"nested error", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: week, requests_per_unit: 1}\n      - key: j", "a.yaml:7: duplicate descriptor composite key 'd.k.j'"},
	} {
		_, err := Parse(map[string][]byte{"a.yaml": []byte(tc.yaml)})
		var ce *ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	_, err := Parse(map[string][]byte{"a.yaml": []byte("domain: d"), "b.yml": []byte("domain: d")})
	if err == nil || err.Error() != "b.yml: duplicate domain 'd' in config file (also in a.yaml)" {
		t.Fatal(err)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a")
	write("b.yml", "domain: b")
	write(".hidden.yaml", "not: loaded")
	write("notes.txt", "not: loaded")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Files(), " "); got != "a.yaml b.yml" {
		t.Fatalf("files %q", got)
	}
	if got := strings.Join(c.Domains(), " "); got != "a b" {
		t.Fatalf("domains %q", got)
	}
	if _, err := LoadDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory loaded")
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"k_/a*", "k_/a", true},
		{"k_/a*", "k_/abc", true},
		{"k_/a*", "k_/b", false},
		{"k_*x*y", "k_xy", true},
		{"k_*x*y", "k_1x2y", true},
		{"k_*x*y", "k_y", false},
		{"k_ab*ba", "k_aba", false}, // the prefix and suffix may not overlap
		{"k_ab*ba", "k_abba", true},
	} {
		if got := match(strings.Split(tc.pattern, "*"), tc.value); got != tc.want {
			t.Errorf("match(%q, %q) = %v", tc.pattern, tc.value, got)
		}
	}
}
