package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeJSON decodes a JSON document of p's keys: the same keys, in the
// same forms, as the YAML file (DecodeYAML), as a JSON object. A value may
// be a string, a number, a boolean or null (the default); a key set twice
// in one object is an error, as in YAML. name is the document's name in
// errors, which give the line of the key ("xfer_open:1: memory_mb: "abc":
// not an integer"); a refused document's error is an *Error.
func DecodeJSON(name string, data []byte, p Program) (Document, error) {
	root, err := parseJSON(data)
	if err != nil {
		return Document{}, &Error{File: name, Problems: []Problem{{Line: err.line, Err: fmt.Errorf("%w: %w", ErrSyntax, err.err)}}}
	}
	return decode(name, root, p)
}

// jsonError is a syntax error and its line.
type jsonError struct {
	line int
	err  error
}

// maxJSONDepth bounds the nesting parseJSON follows.
const maxJSONDepth = 64

func parseJSON(data []byte) (*node, *jsonError) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &jsonParser{dec: dec, data: data}
	root, err := p.value(0)
	if err != nil {
		return nil, p.wrap(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &jsonError{p.line(dec.InputOffset()), errors.New("data after the JSON value")}
	}
	return root, nil
}

type jsonParser struct {
	dec  *json.Decoder
	data []byte
}

// line is the line of the byte at offset off.
func (p *jsonParser) line(off int64) int {
	off = min(max(off, 0), int64(len(p.data)))
	return 1 + bytes.Count(p.data[:off], []byte{'\n'})
}

func (p *jsonParser) wrap(err error) *jsonError {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return &jsonError{p.line(se.Offset), err}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &jsonError{p.line(p.dec.InputOffset()), err}
}

// value reads one JSON value into a node.
func (p *jsonParser) value(depth int) (*node, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{line: p.line(p.dec.InputOffset())}
	switch t := tok.(type) {
	case nil:
		n.kind = nullNode
	case string:
		n.kind, n.value = scalarNode, t
	case json.Number:
		n.kind, n.value = scalarNode, t.String()
	case bool:
		n.kind, n.value = scalarNode, fmt.Sprint(t)
	case json.Delim:
		if depth >= maxJSONDepth {
			return nil, fmt.Errorf("nested more than %d deep", maxJSONDepth)
		}
		if t == '{' {
			n.kind = mappingNode
		} else {
			n.kind = sequenceNode
		}
		for p.dec.More() {
			var key *node
			if t == '{' {
				kt, err := p.dec.Token()
				if err != nil {
					return nil, err
				}
				key = &node{kind: scalarNode, value: fmt.Sprint(kt), line: p.line(p.dec.InputOffset())}
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			switch {
			case depth >= maxDepth:
			case key != nil:
				n.pairs = append(n.pairs, pair{key, v})
			default:
				n.items = append(n.items, v)
			}
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	}
	return n, nil
}
