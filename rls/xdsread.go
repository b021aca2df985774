package rls

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// xdsConfig is the config of an update's resources: each read into the
// form a config file is decoded into (fileForm), named after the resource,
// and checked by the code that checks files (assemble). An update of more
// than maxDescriptors descriptors (0: DefaultMaxDescriptors; below 0: no
// limit) is refused before any of it is read.
//
// A resource is read from its wire form straight into the form (readWire):
// reading it into the generated messages first, then copying those, cost
// about as much memory again as the config. What readWire leaves to them
// (metadata, quota_mode, a wire form that does not parse) is read through
// them (resourceForm), so that a fault is named as the messages name it.
func xdsConfig(resp *discoverypb.DiscoveryResponse, maxDescriptors int) (*Config, error) {
	if resp.GetTypeUrl() != RateLimitConfigType {
		return nil, fmt.Errorf("type %s: only %s is asked for", resp.GetTypeUrl(), RateLimitConfigType)
	}
	if maxDescriptors == 0 {
		maxDescriptors = DefaultMaxDescriptors
	}
	res := resp.GetResources()
	if maxDescriptors > 0 {
		n := 0
		for _, r := range res {
			if n += countDescriptors(r.GetValue(), 3, maxDescriptors-n+1); n > maxDescriptors {
				return nil, fmt.Errorf("the update holds more than %d descriptors, the limit of an update", maxDescriptors)
			}
		}
	}
	names := make([]string, 0, len(res))
	forms := make(map[string]*fileForm, len(res))
	for i, r := range res {
		var (
			name string
			form *fileForm
			ok   bool
			rc   *rlcfg.RateLimitConfig
		)
		if r.MessageIs(rateLimitConfig) {
			name, form, ok = readWire(r.GetValue())
		}
		if !ok {
			rc = &rlcfg.RateLimitConfig{}
			if err := r.UnmarshalTo(rc); err != nil {
				return nil, fmt.Errorf("resource %d: %v", i, err)
			}
			name = rc.GetName()
		}
		if name == "" {
			name = fmt.Sprintf("resource %d", i)
		}
		if _, dup := forms[name]; dup {
			return nil, fmt.Errorf("two resources named %q", name)
		}
		if rc != nil {
			if err := extensionsWithoutRateLimit(rc.GetDescriptors()); err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			form = resourceForm(name, rc)
		}
		form.name = name
		forms[name] = form
		names = append(names, name)
	}
	slices.Sort(names)
	return assemble(names, func(name string) *fileForm { return forms[name] })
}

// rateLimitConfig is the message type resources must be of.
var rateLimitConfig = &rlcfg.RateLimitConfig{}

// countDescriptors counts, in a message's wire form, its fields numbered
// field (a RateLimitConfig's descriptors: 3) and, in each, its own
// descriptors (4), down to any depth; it stops once it has counted most.
// A wire form that does not parse is counted as far as it does: its
// unmarshalling then fails with the reason.
func countDescriptors(b []byte, field protowire.Number, most int) int {
	n := 0
	for len(b) > 0 && n < most {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		if num == field && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return n
			}
			n++
			n += countDescriptors(v, 4, most-n)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return n
		}
		b = b[l:]
	}
	return n
}

// The wire form of the resource (ratelimit.config.ratelimit.v3's
// rls_conf.proto): its fields' numbers.
const (
	configName        protowire.Number = 1
	configDomain      protowire.Number = 2
	configDescriptors protowire.Number = 3

	descriptorKey         protowire.Number = 1
	descriptorValue       protowire.Number = 2
	descriptorRateLimit   protowire.Number = 3
	descriptorDescriptors protowire.Number = 4
	descriptorShadow      protowire.Number = 5
	descriptorDetailed    protowire.Number = 6
	descriptorQuotaMode   protowire.Number = 7
	descriptorMetadata    protowire.Number = 8

	policyUnit      protowire.Number = 1
	policyPerUnit   protowire.Number = 2
	policyUnlimited protowire.Number = 3
	policyName      protowire.Number = 4
	policyReplaces  protowire.Number = 5

	replaceName protowire.Number = 1
)

// maxWireDepth is the deepest nesting of descriptors readWire reads; a
// deeper resource is read through the generated messages (which refuse it
// past protobuf's limit, 10,000).
const maxWireDepth = 100

// readWire reads a RateLimitConfig's wire form into the form of the file
// it stands for, and its name. It reads fields as the generated messages
// do: the last of a field given twice, a message given twice merged, a
// field of an unknown number or of another wire type skipped. It declines
// (ok false) what it leaves to them: a descriptor with metadata or
// quota_mode, text that is not UTF-8, a wire form that does not parse,
// descriptors nested deeper than maxWireDepth.
func readWire(b []byte) (name string, f *fileForm, ok bool) {
	r := wireReader{ok: true}
	f = &fileForm{}
	if n := countFields(b, configDescriptors); n > 0 {
		f.descriptors = make([]descriptorForm, 0, n)
	}
	for len(b) > 0 && r.ok {
		num, typ, v := r.field(&b)
		switch {
		case typ != protowire.BytesType:
		case num == configName:
			name = r.text(v)
		case num == configDomain:
			f.domain = r.text(v)
		case num == configDescriptors:
			f.descriptors = append(f.descriptors, r.descriptor(v, 1))
		}
	}
	return name, f, r.ok
}

// wireReader reads one resource's wire form; ok turns false when it
// declines it.
type wireReader struct{ ok bool }

// field consumes b's next field: its number and wire type, and its value's
// bytes (a varint's too, for varint).
func (r *wireReader) field(b *[]byte) (protowire.Number, protowire.Type, []byte) {
	num, typ, n := protowire.ConsumeTag(*b)
	if n < 0 || !num.IsValid() {
		r.ok = false
		return 0, 0, nil
	}
	*b = (*b)[n:]
	m := protowire.ConsumeFieldValue(num, typ, *b)
	if m < 0 {
		r.ok = false
		return 0, 0, nil
	}
	v := (*b)[:m]
	*b = (*b)[m:]
	if typ == protowire.BytesType {
		v, _ = protowire.ConsumeBytes(v)
	}
	return num, typ, v
}

// text is a string field's value.
func (r *wireReader) text(v []byte) string {
	if !utf8.Valid(v) {
		r.ok = false
		return ""
	}
	return string(v)
}

// varint is a varint field's value.
func (r *wireReader) varint(v []byte) uint64 {
	x, n := protowire.ConsumeVarint(v)
	if n < 0 {
		r.ok = false
	}
	return x
}

// countFields counts b's fields numbered num of the bytes wire type (to
// size the list they make), as far as b parses.
func countFields(b []byte, num protowire.Number) int {
	n := 0
	for len(b) > 0 {
		k, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(k, typ, b)
		if l < 0 {
			return n
		}
		b = b[l:]
		if k == num && typ == protowire.BytesType {
			n++
		}
	}
	return n
}

// policy is a rate_limit as read so far: its fields may come in any order,
// and in several parts to merge.
type policy struct {
	unit      rlcfg.RateLimitUnit
	perUnit   uint32
	unlimited bool
	name      string
	replaces  []replaceForm
}

func (r *wireReader) descriptor(b []byte, depth int) descriptorForm {
	var d descriptorForm
	if depth > maxWireDepth {
		r.ok = false
		return d
	}
	if n := countFields(b, descriptorDescriptors); n > 0 {
		d.descriptors = make([]descriptorForm, 0, n)
	}
	var p *policy
	for len(b) > 0 && r.ok {
		num, typ, v := r.field(&b)
		switch {
		case !r.ok:
		case num == descriptorMetadata && typ == protowire.BytesType, num == descriptorQuotaMode && typ == protowire.VarintType:
			r.ok = false // left to the messages, which say what is wrong with them
		case typ == protowire.VarintType:
			switch num {
			case descriptorShadow:
				d.shadow = r.varint(v) != 0
			case descriptorDetailed:
				d.detailed = r.varint(v) != 0
			}
		case typ != protowire.BytesType:
		case num == descriptorKey:
			d.key = r.text(v)
		case num == descriptorValue:
			d.value = r.text(v)
		case num == descriptorRateLimit:
			if p == nil {
				p = &policy{}
			}
			r.policy(p, v)
		case num == descriptorDescriptors:
			d.descriptors = append(d.descriptors, r.descriptor(v, depth+1))
		}
	}
	if p != nil {
		d.rateLimit = &rateLimitForm{perUnit: p.perUnit, name: p.name, unlimited: p.unlimited,
			unit: unitName(p.unit, p.unlimited), replaces: p.replaces}
	}
	return d
}

// policy reads a part of a rate_limit into p.
func (r *wireReader) policy(p *policy, b []byte) {
	for len(b) > 0 && r.ok {
		num, typ, v := r.field(&b)
		switch {
		case !r.ok:
		case typ == protowire.VarintType:
			switch num {
			case policyUnit:
				p.unit = rlcfg.RateLimitUnit(int32(r.varint(v)))
			case policyPerUnit:
				p.perUnit = uint32(r.varint(v))
			case policyUnlimited:
				p.unlimited = r.varint(v) != 0
			}
		case typ != protowire.BytesType:
		case num == policyName:
			p.name = r.text(v)
		case num == policyReplaces:
			var rp replaceForm
			for len(v) > 0 && r.ok {
				num, typ, x := r.field(&v)
				if r.ok && num == replaceName && typ == protowire.BytesType {
					rp.name = r.text(x)
				}
			}
			p.replaces = append(p.replaces, rp)
		}
	}
}

// unitNames are the units' names as a file gives them.
var unitNames = map[rlcfg.RateLimitUnit]string{
	rlcfg.RateLimitUnit_UNKNOWN: "unknown",
	rlcfg.RateLimitUnit_SECOND:  "second",
	rlcfg.RateLimitUnit_MINUTE:  "minute",
	rlcfg.RateLimitUnit_HOUR:    "hour",
	rlcfg.RateLimitUnit_DAY:     "day",
	rlcfg.RateLimitUnit_WEEK:    "week",
	rlcfg.RateLimitUnit_MONTH:   "month",
	rlcfg.RateLimitUnit_YEAR:    "year",
}

// unitName is a policy's unit as a file's rate_limit names it: none for
// UNKNOWN, the proto's default, where a file gives no unit (unitless: an
// unlimited or concurrency limit); a number the enum does not name, as
// that number (refused, naming it).
func unitName(u rlcfg.RateLimitUnit, unitless bool) string {
	if u == rlcfg.RateLimitUnit_UNKNOWN && unitless {
		return ""
	}
	if name, ok := unitNames[u]; ok {
		return name
	}
	return strings.ToLower(u.String())
}

// The keys a descriptor's metadata may give rls, for what the resource
// has no field for, each read as the file's key of that name is and
// checked by the same code (build):
//
//   - rateLimitExtensions as if inside the descriptor's rate_limit:
//     algorithm (fixed_window, sliding_window, sliding_log, gcra,
//     token_bucket or concurrency), debt and lease (true or false), and
//     concurrency's limit (a whole number, 1 to 100000), hold_ttl
//     (whole seconds: "30s", "2m" or 30; concurrency's and a reserve's)
//     and reserve (true or false). A descriptor without a
//     rate_limit giving one is refused (extensionsWithoutRateLimit).
//   - descriptorExtensions as the descriptor's own: holder,
//     value_to_metric and share_threshold (true or false), which a
//     descriptor without a rate_limit may say of those below it.
//
// The resource (ratelimit.config.ratelimit.v3 as go.mod has it) has no
// field for value_to_metric or share_threshold either. A descriptor's
// other metadata keys are its metadata, as the peer reads it.
var (
	rateLimitExtensions  = []string{"algorithm", "debt", "lease", "limit", "hold_ttl", "reserve"}
	descriptorExtensions = []string{"holder", "value_to_metric", "share_threshold"}
	extensionKeys        = slices.Concat(rateLimitExtensions, descriptorExtensions)
)

func isExtension(k string) bool { return slices.Contains(extensionKeys, k) }

// extensionsWithoutRateLimit is the first descriptor, depth first, whose
// metadata gives keys to a rate_limit it does not have.
func extensionsWithoutRateLimit(ds []*rlcfg.RateLimitDescriptor) error {
	for _, d := range ds {
		if d.GetRateLimit() == nil {
			var ext []string
			for k := range d.GetMetadata().GetFields() {
				if slices.Contains(rateLimitExtensions, k) {
					ext = append(ext, k)
				}
			}
			if len(ext) > 0 {
				slices.Sort(ext)
				return fmt.Errorf("descriptor %q: metadata %s without a rate_limit", d.GetKey(), strings.Join(ext, ", "))
			}
		}
		if err := extensionsWithoutRateLimit(d.GetDescriptors()); err != nil {
			return err
		}
	}
	return nil
}

// resourceForm reads a resource, as the generated messages hold it, into
// the form of the config file it stands for.
func resourceForm(name string, rc *rlcfg.RateLimitConfig) *fileForm {
	r := resourceReader{name: name}
	return &fileForm{name: name, domain: rc.GetDomain(), descriptors: r.descriptors(rc.GetDescriptors(), rc.GetDomain()+".")}
}

// resourceReader reads one resource.
type resourceReader struct{ name string }

func (r resourceReader) fault(msg string) error { return &ConfigError{File: r.name, Msg: msg} }

// descriptors reads a list of descriptors; prefix is the parent's stat key
// and a dot (for the faults that name a descriptor). A descriptor whose
// metadata gives it a value that cannot be read holds the fault (err), as
// a file's does, and build stops there.
func (r resourceReader) descriptors(ds []*rlcfg.RateLimitDescriptor, prefix string) []descriptorForm {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptorForm, len(ds))
	for i, d := range ds {
		f := &out[i]
		f.key, f.value, f.shadow, f.detailed, f.quota = d.GetKey(), d.GetValue(), d.GetShadowMode(), d.GetDetailedMetric(), d.GetQuotaMode()
		statKey := prefix + f.key
		if f.value != "" {
			statKey += "_" + f.value
		}
		md := d.GetMetadata().GetFields()
		// In the order a file's are read.
		if err := r.fields(md, statKey, []field{{"holder", &f.holder}, {"value_to_metric", &f.toMetric}, {"share_threshold", &f.share}}); err != nil {
			f.err = err
			continue
		}
		for k, v := range md { // the keys not rls's own are the descriptor's metadata, as the peer reads it
			if !isExtension(k) {
				if f.metadata == nil {
					f.metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
				}
				f.metadata.Fields[k] = v
			}
		}
		if p := d.GetRateLimit(); p != nil {
			f.rateLimit = r.rateLimit(p, md, statKey)
		}
		f.descriptors = r.descriptors(d.GetDescriptors(), statKey+".")
	}
	return out
}

// rateLimit reads a policy, and the keys its descriptor's (of stat key
// statKey) metadata gives it, as a file's rate_limit.
func (r resourceReader) rateLimit(p *rlcfg.RateLimitPolicy, md map[string]*structpb.Value, statKey string) *rateLimitForm {
	f := &rateLimitForm{perUnit: p.GetRequestsPerUnit(), name: p.GetName(), unlimited: p.GetUnlimited()}
	if rs := p.GetReplaces(); len(rs) > 0 {
		f.replaces = make([]replaceForm, len(rs))
		for i, rp := range rs {
			f.replaces[i].name = rp.GetName()
		}
	}
	// In the order a file's are read.
	if err := r.fields(md, statKey, []field{{"algorithm", &f.algorithm}, {"debt", &f.debt}, {"lease", &f.lease}, {"limit", &f.limit}, {"hold_ttl", &f.holdTTL}, {"reserve", &f.reserve}, {"spread", &f.spread}, {"overrides", &f.overrides}}); err != nil {
		f.err = err
		return f
	}
	f.unit = unitName(p.GetUnit(), p.GetUnlimited() || f.algorithm == string(Concurrency))
	return f
}

// fields reads the metadata values of the keys listed into their places
// (as loader.scalars reads a file's), in the order of the list, stopping
// at the first that cannot be read; of is the descriptor's stat key.
func (r resourceReader) fields(md map[string]*structpb.Value, of string, fields []field) error {
	if len(md) == 0 {
		return nil
	}
	for _, kv := range fields {
		if v := md[kv.name]; v != nil {
			if err := metaField(v, kv.name, of, kv.dst); err != nil {
				return r.fault(err.Error())
			}
		}
	}
	return nil
}

// metaField reads a metadata value into dst (a *string, *bool or *uint32)
// as a file's value of the same key is read into it, and a fault in the
// same words, naming the key and the descriptor it is of (see fieldName).
func metaField(v *structpb.Value, key, of string, dst any) error {
	var err error
	switch p := dst.(type) {
	case *string:
		*p, err = metaText(v, key, of)
	case *bool:
		*p, err = metaBool(v, key, of)
	case *uint32:
		*p, err = metaUint32(v, key, of)
	default:
		panic(fmt.Sprintf("rls: metadata read into %T", dst))
	}
	return err
}

// metaText reads a metadata value as a file's text value (see
// metaNumber), null as nothing.
func metaText(v *structpb.Value, key, of string) (string, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, nil
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue), nil
	case *structpb.Value_NumberValue:
		return metaNumber(k.NumberValue), nil
	case *structpb.Value_StructValue, *structpb.Value_ListValue:
		return "", notSingle(key, of)
	}
	return "", nil // null
}

// metaBool reads a metadata value as a file's true or false: a bool, or
// text of YAML 1.1's (yes, on, n, …), null as false.
func metaBool(v *structpb.Value, key, of string) (bool, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		return k.BoolValue, nil
	case *structpb.Value_StringValue:
		switch k.StringValue {
		case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
			return true, nil
		case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
			return false, nil
		}
		return false, cannotRead(key, of, k.StringValue, new(bool))
	case *structpb.Value_NumberValue:
		return false, cannotRead(key, of, metaNumber(k.NumberValue), new(bool))
	case *structpb.Value_StructValue, *structpb.Value_ListValue:
		return false, notSingle(key, of)
	}
	return false, nil // null
}

// metaUint32 reads a metadata value as a file's whole number from 0 to
// 4294967295: a number in that range, of which, as YAML reads a number
// into one, the whole part (2.5 is 2, as limit: 2.5 in a file); text,
// even of digits, is refused (YAML reads "10" as text), null is 0.
func metaUint32(v *structpb.Value, key, of string) (uint32, error) {
	var text string
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if n := math.Trunc(k.NumberValue); n >= 0 && n <= math.MaxUint32 { // NaN is neither
			return uint32(n), nil
		}
		text = metaNumber(k.NumberValue)
	case *structpb.Value_StringValue:
		text = k.StringValue
	case *structpb.Value_BoolValue:
		text = strconv.FormatBool(k.BoolValue)
	case *structpb.Value_StructValue, *structpb.Value_ListValue:
		return 0, notSingle(key, of)
	default:
		return 0, nil // null
	}
	return 0, cannotRead(key, of, text, new(uint32))
}

// metaNumber is a metadata number as a file's text: as YAML writes it,
// and NaN and the infinities by the names structpb gives them.
func metaNumber(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
