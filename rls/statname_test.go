package rls

import "testing"

// A stat key is named as the peer names its stats
// (utils.SanitizeStatName): ":" and "|" made "_", and the dots of an IPv4
// address; the first run of four digit groups from the left is the
// address, as the peer's regular expression finds it.
func TestStatName(t *testing.T) {
	for in, want := range map[string]string{
		"d.k_v":                  "d.k_v",
		"d.route_10.0.0.1.m_GET": "d.route_10_0_0_1.m_GET",
		"d.k_a:b|c":              "d.k_a_b_c",
		"d.k_1234.5.6.7":         "d.k_1234_5_6_7",
		"d.v1.2.3":               "d.v1.2.3", // three groups: not an address
		"d.k_1.2.3.4.5":          "d.k_1_2_3_4.5",
		"d.k_1.key2_2":           "d.k_1.key2_2",
	} {
		if got := statName(in); got != want {
			t.Errorf("statName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The peer's TestValueToMetric_WithEmptyValue: value_to_metric on a level
// whose value is empty writes its key alone, with no underscore.
func TestValueToMetricEmptyValue(t *testing.T) {
	c := mustParse(t, map[string]string{"v.yaml": `
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
`})
	for _, c2 := range []struct{ route, method, want string }{
		{"", "GET", "domain.route.http_method_GET.subject_id"},
		{"draw", "", "domain.route_draw.http_method.subject_id"},
		{"", "", "domain.route.http_method.subject_id"},
		{"draw", "GET", "domain.route_draw.http_method_GET.subject_id"},
	} {
		if _, stat := c.lookup("domain", descriptor("route", c2.route, "http_method", c2.method, "subject_id", "123")); stat != c2.want {
			t.Errorf("route %q, http_method %q: %s, want %s", c2.route, c2.method, stat, c2.want)
		}
	}
}
