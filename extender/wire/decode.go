package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// This file is a single-pass decoder of ExtenderArgs. encoding/json validates
// a document, then walks it again to decode, and NodeItem.UnmarshalJSON makes
// a third and fourth pass over every Node; at 5000 realistic Nodes (~86 MiB)
// that is most of a filter call. The scanner below validates each byte once,
// reads only NodeNames, the Nodes' names and annotations, and records each
// Node's byte span to echo it. The Pod's semantics (quantities, merging)
// matter, so it still goes through encoding/json, into podArgs: only the
// fields the verbs read.
//
// It accepts exactly what json.Unmarshal into Args (with podArgs for the
// Pod) accepts and produces the same Args: keys match case-insensitively
// (bytes.EqualFold, as encoding/json does), duplicate keys follow
// encoding/json (last wins; objects merge into what an earlier key decoded;
// a reused []string keeps the elements a null does not overwrite), strings
// with escapes or invalid UTF-8 are unquoted by encoding/json itself, and
// nesting is limited to encoding/json's 10000 levels. FuzzDecodeExtenderArgsEquivalence holds it to that.

// maxNestingDepth is encoding/json's limit on nested arrays and objects.
const maxNestingDepth = 10000

// errNotObject is the type error of a non-object where an object is needed.
var errNotObject = errors.New("not a JSON object")

type scanner struct {
	data  []byte
	pos   int
	depth int
	// scratch lends the element list of NodeNames.
	scratch *Scratch
	// pod is the Pod decoded so far (a repeated key merges into it).
	pod *podArgs
}

func (s *scanner) syntaxErr(what string) error {
	if s.pos >= len(s.data) {
		return fmt.Errorf("invalid JSON: unexpected end of input, expecting %s", what)
	}
	return fmt.Errorf("invalid JSON: invalid character %q at offset %d, expecting %s", s.data[s.pos], s.pos, what)
}

// typeErr reports a valid value of the wrong type. The rest of the document
// is not validated: json.Unmarshal fails on such a document too.
func (s *scanner) typeErr(where string, err error) error {
	return fmt.Errorf("%s at offset %d: %w", where, s.pos, err)
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// expect consumes c after optional whitespace.
func (s *scanner) expect(c byte, what string) error {
	s.ws()
	if s.peek() != c {
		return s.syntaxErr(what)
	}
	s.pos++
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// str scans the string at s.pos (which holds '"') and returns the span of
// its content. plain means no escapes and only ASCII other than <, > and &:
// the content is the string, and encoding/json writes it back unchanged.
func (s *scanner) str() (start, end int, plain bool, err error) {
	d := s.data
	i := s.pos + 1
	start = i
	plain = true
	for {
		// The plain run is the hot loop: Node JSON is mostly strings.
		for i+8 <= len(d) && !notPlain[d[i]] && !notPlain[d[i+1]] && !notPlain[d[i+2]] && !notPlain[d[i+3]] &&
			!notPlain[d[i+4]] && !notPlain[d[i+5]] && !notPlain[d[i+6]] && !notPlain[d[i+7]] {
			i += 8
		}
		for i < len(d) && !notPlain[d[i]] {
			i++
		}
		if i >= len(d) {
			s.pos = i
			return 0, 0, false, s.syntaxErr("end of string")
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return start, i, plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(d) {
				s.pos = i + 1
				return 0, 0, false, s.syntaxErr("escape")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := 2; k < 6; k++ {
					if i+k >= len(d) || !isHex(d[i+k]) {
						s.pos = i + k
						return 0, 0, false, s.syntaxErr("hexadecimal digit in \\u escape")
					}
				}
				i += 6
			default:
				s.pos = i + 1
				return 0, 0, false, s.syntaxErr("escape character")
			}
		case c < 0x20:
			s.pos = i
			return 0, 0, false, s.syntaxErr("string character (control characters must be escaped)")
		default:
			// Non-ASCII, <, > or &: valid, but not plain.
			plain = false
			i++
		}
	}
}

// text returns the string whose content is d[start:end], quotes at
// start-1 and end, the way encoding/json decodes it.
func (s *scanner) text(start, end int, plain bool) (string, error) {
	raw := s.data[start:end]
	if plain || bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), nil
	}
	// Escapes and invalid UTF-8 (replaced by U+FFFD) are rare: let
	// encoding/json decide.
	var out string
	if err := json.Unmarshal(s.data[start-1:end+1], &out); err != nil {
		return "", fmt.Errorf("decoding string at offset %d: %w", start-1, err)
	}
	return out, nil
}

// key scans an object key and its colon and reports which of names it
// matches the way encoding/json matches field names; -1 for none.
func (s *scanner) key(names ...string) (int, error) {
	s.ws()
	if s.peek() != '"' {
		return -1, s.syntaxErr("object key")
	}
	start, end, plain, err := s.str()
	if err != nil {
		return -1, err
	}
	if err := s.expect(':', "':' after object key"); err != nil {
		return -1, err
	}
	s.ws()
	k := s.data[start:end]
	if !plain {
		t, err := s.text(start, end, plain)
		if err != nil {
			return -1, err
		}
		k = []byte(t)
	}
	for i, n := range names {
		if len(k) >= len(n) && bytes.EqualFold(k, []byte(n)) {
			return i, nil
		}
	}
	return -1, nil
}

// wantObject returns nil when an object starts next; anything else is
// skipped (so that a syntax error still wins, as in encoding/json) and
// becomes a type error naming where.
func (s *scanner) wantObject(where string) error {
	if s.peek() == '{' {
		return nil
	}
	if err := s.skip(); err != nil {
		return err
	}
	return s.typeErr(where, errNotObject)
}

// fields reads the members of the object that starts at '{': for each
// member it calls field with the index of the member's key among names (-1
// for any other key; field must then consume the value, usually with skip).
func (s *scanner) fields(field func(k int) error, names ...string) error {
	empty, err := s.open('}')
	if err != nil || empty {
		return err
	}
	for {
		k, err := s.key(names...)
		if err != nil {
			return err
		}
		if err := field(k); err != nil {
			return err
		}
		more, err := s.next('}')
		if err != nil || !more {
			return err
		}
	}
}

// next consumes the ',' or the closing byte after a member or element and
// reports whether the container continues.
func (s *scanner) next(closing byte) (bool, error) {
	s.ws()
	switch s.peek() {
	case ',':
		s.pos++
		return true, nil
	case closing:
		s.pos++
		s.depth--
		return false, nil
	}
	return false, s.syntaxErr(fmt.Sprintf("',' or '%c'", closing))
}

// open consumes '{' or '[' and reports whether the container is empty.
func (s *scanner) open(closing byte) (empty bool, err error) {
	s.depth++
	if s.depth > maxNestingDepth {
		return false, fmt.Errorf("invalid JSON: exceeded max depth at offset %d", s.pos)
	}
	s.pos++
	s.ws()
	if s.peek() == closing {
		s.pos++
		s.depth--
		return true, nil
	}
	return false, nil
}

// null consumes a null literal if one is next.
func (s *scanner) null() bool {
	if bytes.HasPrefix(s.data[s.pos:], []byte("null")) {
		s.pos += 4
		return true
	}
	return false
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		// Point at the first differing byte, as a parser would.
		for i := 0; i < len(word) && s.pos < len(s.data) && s.data[s.pos] == word[i]; i++ {
			s.pos++
		}
		return s.syntaxErr("literal " + word)
	}
	s.pos += len(word)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return s.syntaxErr("digit")
	}
	if s.peek() == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.syntaxErr("digit after decimal point")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if s.digits() == 0 {
			return s.syntaxErr("digit in exponent")
		}
	}
	return nil
}

// skip validates the value at s.pos (whitespace already skipped) and moves
// past it.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '{':
		empty, err := s.open('}')
		if err != nil || empty {
			return err
		}
		for {
			s.ws()
			if s.peek() != '"' {
				return s.syntaxErr("object key")
			}
			if _, _, _, err := s.str(); err != nil {
				return err
			}
			if err := s.expect(':', "':' after object key"); err != nil {
				return err
			}
			s.ws()
			if err := s.skip(); err != nil {
				return err
			}
			more, err := s.next('}')
			if err != nil || !more {
				return err
			}
		}
	case c == '[':
		empty, err := s.open(']')
		if err != nil || empty {
			return err
		}
		for {
			s.ws()
			if err := s.skip(); err != nil {
				return err
			}
			more, err := s.next(']')
			if err != nil || !more {
				return err
			}
		}
	case c == '"':
		_, _, _, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return s.syntaxErr("value")
}

// span skips the value at s.pos and returns its bytes.
func (s *scanner) span() ([]byte, error) {
	start := s.pos
	err := s.skip()
	return s.data[start:s.pos], err
}

// decodeExtenderArgsFast decodes the body of /filter and /prioritize like
// json.Unmarshal into Args. NodeItem.Raw aliases data.
func decodeExtenderArgsFast(data []byte, sc *Scratch) (*Args, error) {
	s := &scanner{data: data, scratch: sc}
	var args Args
	s.ws()
	switch s.peek() {
	case '{':
		if err := s.args(&args); err != nil {
			return nil, err
		}
		args.Pod = s.pod.pod()
	case 'n':
		// null leaves Args empty.
		if err := s.literal("null"); err != nil {
			return nil, err
		}
	default:
		if err := s.skip(); err != nil {
			return nil, err
		}
		return nil, s.typeErr("ExtenderArgs", errNotObject)
	}
	s.ws()
	if s.pos != len(data) {
		return nil, s.syntaxErr("end of input after the top-level value")
	}
	return &args, nil
}

func (s *scanner) args(args *Args) error {
	return s.fields(func(k int) error {
		switch k {
		case 0:
			return s.podArgs()
		case 1:
			return s.nodeNames(args)
		case 2:
			return s.nodes(args)
		}
		return s.skip()
	}, "Pod", "NodeNames", "Nodes")
}

// podArgs decodes the Pod with encoding/json, into the podArgs an earlier
// "Pod" key left, as encoding/json does.
func (s *scanner) podArgs() error {
	if s.null() {
		s.pod = nil
		return nil
	}
	raw, err := s.span()
	if err != nil {
		return err
	}
	if s.pod == nil {
		s.pod = &podArgs{}
	}
	if err := json.Unmarshal(raw, s.pod); err != nil {
		return fmt.Errorf("decoding ExtenderArgs.Pod: %w", err)
	}
	return nil
}

// element is one NodeNames element before it is turned into a string.
type element struct {
	start, end int
	// kind: 0 plain string, 1 string needing unquoting, 2 null.
	kind uint8
}

func (s *scanner) nodeNames(args *Args) error {
	if s.null() {
		args.NodeNames, args.plainNames = nil, false
		return nil
	}
	if s.peek() != '[' {
		if err := s.skip(); err != nil {
			return err
		}
		return s.typeErr("ExtenderArgs.NodeNames", errors.New("not a JSON array"))
	}
	arrStart := s.pos
	empty, err := s.open(']')
	if err != nil {
		return err
	}
	elems := s.scratch.elems[:0]
	defer func() { s.scratch.elems = elems }()
	if !empty {
		for {
			s.ws()
			switch s.peek() {
			case '"':
				start, end, plain, err := s.str()
				if err != nil {
					return err
				}
				e := element{start: start, end: end}
				if !plain {
					e.kind = 1
				}
				elems = append(elems, e)
			case 'n':
				if err := s.literal("null"); err != nil {
					return err
				}
				elems = append(elems, element{kind: 2})
			default:
				if err := s.skip(); err != nil {
					return err
				}
				return s.typeErr("ExtenderArgs.NodeNames element", errors.New("not a string"))
			}
			more, err := s.next(']')
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
	if args.NodeNames == nil {
		args.NodeNames = new([]string)
	}
	args.plainNames = true
	for _, e := range elems {
		args.plainNames = args.plainNames && e.kind == 0
	}
	if len(elems) == 0 {
		*args.NodeNames = []string{}
		return nil
	}
	// One string holds every plain name: one allocation, not one per node.
	all := string(s.data[arrStart:s.pos])
	names := *args.NodeNames
	if cap(names) < len(elems) {
		// Grow once, keeping what lies beyond len: encoding/json would
		// have reused it before growing.
		grown := make([]string, len(names), len(elems))
		copy(grown[:cap(names)], names[:cap(names)])
		names = grown
	}
	for i, e := range elems {
		// Like encoding/json, reuse the slice an earlier key decoded: a
		// null element keeps what was there.
		if i >= len(names) {
			names = names[:i+1]
		}
		switch e.kind {
		case 0:
			names[i] = all[e.start-arrStart : e.end-arrStart]
		case 1:
			t, err := s.text(e.start, e.end, false)
			if err != nil {
				return err
			}
			names[i] = t
		}
	}
	*args.NodeNames = names[:len(elems)]
	return nil
}

func (s *scanner) nodes(args *Args) error {
	if s.null() {
		args.Nodes = nil
		return nil
	}
	if err := s.wantObject("ExtenderArgs.Nodes"); err != nil {
		return err
	}
	if args.Nodes == nil {
		args.Nodes = &NodeItems{}
	}
	return s.fields(func(k int) error {
		if k == 0 {
			return s.items(args.Nodes)
		}
		return s.skip()
	}, "items")
}

func (s *scanner) items(nodes *NodeItems) error {
	if s.null() {
		nodes.Items = nil
		return nil
	}
	if s.peek() != '[' {
		if err := s.skip(); err != nil {
			return err
		}
		return s.typeErr("ExtenderArgs.Nodes.items", errors.New("not a JSON array"))
	}
	empty, err := s.open(']')
	if err != nil {
		return err
	}
	// Every element is decoded from scratch by NodeItem.UnmarshalJSON, so
	// nothing of an earlier "items" survives.
	items := []NodeItem{}
	if empty {
		nodes.Items = items
		return nil
	}
	for {
		s.ws()
		var item NodeItem
		start := s.pos
		if err := s.node(&item); err != nil {
			return err
		}
		item.Raw = s.data[start:s.pos]
		items = append(items, item)
		more, err := s.next(']')
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	nodes.Items = items
	return nil
}

// node reads a Node's metadata.name and metadata.annotations.
func (s *scanner) node(item *NodeItem) error {
	if s.null() {
		return nil
	}
	if err := s.wantObject("Node"); err != nil {
		return err
	}
	return s.fields(func(k int) error {
		if k == 0 {
			return s.metadata(item)
		}
		return s.skip()
	}, "metadata")
}

func (s *scanner) metadata(item *NodeItem) error {
	if s.null() {
		// null leaves a struct as it is.
		return nil
	}
	if err := s.wantObject("Node metadata"); err != nil {
		return err
	}
	return s.fields(func(k int) error {
		switch k {
		case 0:
			return s.nodeName(item)
		case 1:
			return s.stringMap(&item.Annotations, "Node metadata.annotations", "Node annotation value")
		case 2:
			return s.stringMap(&item.Labels, "Node metadata.labels", "Node label value")
		}
		return s.skip()
	}, "name", "annotations", "labels")
}

// nodeName reads metadata.name: a string, or null (which leaves it as is).
func (s *scanner) nodeName(item *NodeItem) error {
	switch s.peek() {
	case 'n':
		return s.literal("null")
	case '"':
		start, end, plain, err := s.str()
		if err != nil {
			return err
		}
		item.Name, err = s.text(start, end, plain)
		return err
	}
	if err := s.skip(); err != nil {
		return err
	}
	return s.typeErr("Node metadata.name", errors.New("not a string"))
}

// stringMap reads a map of strings (annotations, labels) into *m, as
// encoding/json would: null clears it, a repeated object merges.
func (s *scanner) stringMap(m *map[string]string, what, valueWhat string) error {
	if s.null() {
		*m = nil
		return nil
	}
	if err := s.wantObject(what); err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	empty, err := s.open('}')
	if err != nil || empty {
		return err
	}
	for {
		s.ws()
		if s.peek() != '"' {
			return s.syntaxErr("object key")
		}
		ks, ke, kplain, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':', "':' after object key"); err != nil {
			return err
		}
		s.ws()
		var v string
		switch s.peek() {
		case 'n':
			// A null map value is stored as "".
			err = s.literal("null")
		case '"':
			var start, end int
			var plain bool
			if start, end, plain, err = s.str(); err == nil {
				v, err = s.text(start, end, plain)
			}
		default:
			if err = s.skip(); err == nil {
				err = s.typeErr(valueWhat, errors.New("not a string"))
			}
		}
		if err != nil {
			return err
		}
		k, err := s.text(ks, ke, kplain)
		if err != nil {
			return err
		}
		(*m)[k] = v
		more, err := s.next('}')
		if err != nil || !more {
			return err
		}
	}
}

// DecodeExtenderArgs decodes and validates the body of /filter and
// /prioritize: Pod is required, and so is one of NodeNames
// (nodeCacheCapable) or Nodes. It gives what json.Unmarshal into Args gives,
// in one pass over data; the Nodes' Raw JSON aliases data, which the caller
// must then leave unchanged.
func DecodeExtenderArgs(data []byte) (*Args, error) {
	return decodeExtenderArgs(data, new(Scratch))
}

// decodeExtenderArgs is DecodeExtenderArgs with its buffers in sc.
func decodeExtenderArgs(data []byte, sc *Scratch) (*Args, error) {
	args, err := decodeExtenderArgsFast(data, sc)
	if err != nil {
		return nil, fmt.Errorf("decoding ExtenderArgs: %w", err)
	}
	return validateArgs(args)
}

func validateArgs(args *Args) (*Args, error) {
	if args.Pod == nil {
		return nil, errors.New("ExtenderArgs.Pod is missing")
	}
	if args.NodeNames == nil && args.Nodes == nil {
		return nil, errors.New("ExtenderArgs needs NodeNames (nodeCacheCapable) or Nodes")
	}
	return args, nil
}
