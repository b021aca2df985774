package rls

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// viaYAML is how rls read an xDS update before it read resources directly:
// each resource written as the YAML file it stands for and parsed as one.
// Kept as the reference the direct reading is held to (FuzzXDSConfig,
// TestXDSFaults) and the cost it is measured against (BenchmarkXDSUpdate).
func viaYAML(resp *discoverypb.DiscoveryResponse) (*Config, error) {
	if resp.GetTypeUrl() != RateLimitConfigType {
		return nil, fmt.Errorf("type %s: only %s is asked for", resp.GetTypeUrl(), RateLimitConfigType)
	}
	files := map[string][]byte{}
	for i, res := range resp.GetResources() {
		rc := &rlcfg.RateLimitConfig{}
		if err := res.UnmarshalTo(rc); err != nil {
			return nil, fmt.Errorf("resource %d: %v", i, err)
		}
		name := rc.GetName()
		if name == "" {
			name = fmt.Sprintf("resource %d", i)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two resources named %q", name)
		}
		b, err := resourceYAML(rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		files[name] = b
	}
	cfg, err := Parse(files)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.Line = 0 // a line of the file made of the resource means nothing to its sender
	}
	return cfg, err
}

// resourceYAML is a RateLimitConfig resource as the config file it stands
// for (what rls's ConfigYAML was).
func resourceYAML(rc *rlcfg.RateLimitConfig) ([]byte, error) {
	descs, err := yamlDescriptors(rc.GetDescriptors())
	if err != nil {
		return nil, err
	}
	root := map[string]any{"domain": rc.GetDomain()}
	if len(descs) > 0 {
		root["descriptors"] = descs
	}
	return yaml.Marshal(root)
}

func yamlDescriptors(ds []*rlcfg.RateLimitDescriptor) ([]map[string]any, error) {
	var out []map[string]any
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if d.GetShadowMode() {
			m["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			m["detailed_metric"] = true
		}
		if d.GetQuotaMode() {
			m["quota_mode"] = true
		}
		var ext map[string]any
		if md := d.GetMetadata(); md != nil {
			rest := map[string]any{}
			for k, v := range md.GetFields() {
				switch {
				case slices.Contains(descriptorExtensions, k):
					m[k] = v.AsInterface() // the descriptor's own key
				case !isExtension(k):
					rest[k] = v.AsInterface()
				default:
					if ext == nil {
						ext = map[string]any{}
					}
					ext[k] = v.AsInterface()
				}
			}
			if len(rest) > 0 {
				m["metadata"] = rest
			}
		}
		if p := d.GetRateLimit(); p != nil {
			rl := map[string]any{"requests_per_unit": p.GetRequestsPerUnit()}
			// A concurrency limit has no unit: UNKNOWN says none.
			unitless := p.GetUnlimited() || ext["algorithm"] == string(Concurrency)
			if u := p.GetUnit(); u != rlcfg.RateLimitUnit_UNKNOWN || !unitless {
				rl["unit"] = strings.ToLower(u.String())
			}
			if p.GetUnlimited() {
				rl["unlimited"] = true
				if p.GetRequestsPerUnit() == 0 {
					delete(rl, "requests_per_unit")
				}
			}
			if p.GetName() != "" {
				rl["name"] = p.GetName()
			}
			if rs := p.GetReplaces(); len(rs) > 0 {
				names := make([]map[string]any, len(rs))
				for i, r := range rs {
					names[i] = map[string]any{"name": r.GetName()}
				}
				rl["replaces"] = names
			}
			for k, v := range ext {
				rl[k] = v
			}
			m["rate_limit"] = rl
		} else if len(ext) > 0 {
			return nil, fmt.Errorf("descriptor %q: metadata %s without a rate_limit", d.GetKey(), strings.Join(slices.Sorted(maps.Keys(ext)), ", "))
		}
		if len(d.GetDescriptors()) > 0 {
			sub, err := yamlDescriptors(d.GetDescriptors())
			if err != nil {
				return nil, err
			}
			m["descriptors"] = sub
		}
		out = append(out, m)
	}
	return out, nil
}

// yamlKeepsTexts reports whether every text of rc reads back from YAML as
// it was written: where one does not, viaYAML read another resource.
func yamlKeepsTexts(rc *rlcfg.RateLimitConfig) bool {
	keeps := func(s string) bool {
		b, err := yaml.Marshal(map[string]string{"x": s})
		if err != nil {
			return false
		}
		var back map[string]string
		return yaml.Unmarshal(b, &back) == nil && back["x"] == s
	}
	var walk func(ds []*rlcfg.RateLimitDescriptor) bool
	walk = func(ds []*rlcfg.RateLimitDescriptor) bool {
		for _, d := range ds {
			if !keeps(d.GetKey()) || !keeps(d.GetValue()) || !keeps(d.GetRateLimit().GetName()) {
				return false
			}
			for _, r := range d.GetRateLimit().GetReplaces() {
				if !keeps(r.GetName()) {
					return false
				}
			}
			for _, v := range d.GetMetadata().GetFields() {
				if s, ok := v.GetKind().(*structpb.Value_StringValue); ok && !keeps(s.StringValue) {
					return false
				}
			}
			if !walk(d.GetDescriptors()) {
				return false
			}
		}
		return true
	}
	return keeps(rc.GetDomain()) && walk(rc.GetDescriptors())
}
