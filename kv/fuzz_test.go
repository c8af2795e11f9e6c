package kv

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// FuzzRequests decodes arbitrary bytes as each request message, as gRPC
// does, and hands the result to a live server's handlers: every request gets
// a response or a gRPC status, never a panic, and the server keeps its value.
func FuzzRequests(f *testing.F) {
	s, err := NewServer(context.Background(), ServerOptions{Engine: xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 4}, MaxValue: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	s.peerWait = 10 * time.Millisecond
	ctx := context.Background()
	if _, err := s.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("value")}}); err != nil {
		f.Fatal(err)
	}
	desc, _ := xfer.RegionDesc{ID: 1, Addr: 4096, Len: 64, Key: 7, Access: xfer.Access(3)}.MarshalBinary()
	for _, m := range []proto.Message{
		&kvpb.GetRequest{Key: []byte("k"), Buffer: desc, InlineMax: 100},
		&kvpb.GetRequest{Key: []byte("k"), Buffer: desc},
		&kvpb.PutRequest{Key: []byte("k2"), Source: &kvpb.PutRequest_Buffer{Buffer: desc}},
		&kvpb.PutRequest{Key: []byte("k3"), Source: &kvpb.PutRequest_Value{Value: []byte("v")}, ServerId: []byte("x")},
		&kvpb.DeleteRequest{Key: []byte("k4")},
		&kvpb.HelloRequest{Protocol: 1},
	} {
		b, _ := proto.Marshal(m)
		for kind := range byte(4) {
			f.Add(kind, b)
		}
	}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		var err error
		switch kind % 4 {
		case 0:
			var req kvpb.GetRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			_, err = s.Get(ctx, &req)
		case 1:
			var req kvpb.PutRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			if string(req.Key) == "k" {
				return // keep the value the check below reads
			}
			_, err = s.Put(ctx, &req)
		case 2:
			var req kvpb.DeleteRequest
			if proto.Unmarshal(data, &req) != nil || string(req.Key) == "k" {
				return
			}
			_, err = s.Delete(ctx, &req)
		case 3:
			var req kvpb.HelloRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			_, err = s.Hello(ctx, &req)
		}
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				t.Fatalf("handler returned a non-status error: %v", err)
			}
		}
		resp, err := s.Get(ctx, &kvpb.GetRequest{Key: []byte("k"), InlineMax: 100})
		if err != nil || string(resp.Value) != "value" {
			t.Fatalf("stored value lost: %v", err)
		}
	})
}

// FuzzFastDecode: whatever the allocation-free decoders accept,
// proto.Unmarshal decodes to the same fields.
func FuzzFastDecode(f *testing.F) {
	for _, m := range []proto.Message{
		&kvpb.Request{Id: 7, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), Buffer: []byte{1, 2}, InlineMax: 4096, ServerId: []byte("id")}}},
		&kvpb.Request{Id: 8, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k")}}},
		&kvpb.Response{Id: 7, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: 3, Version: 9, Inline: true, Value: []byte("abc")}}},
		&kvpb.Request{Id: 7, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), Buffer: []byte{1}, Notify: true}}},
		&kvpb.Response{Id: 7, Code: 5, Message: "not found"},
		&kvpb.Request{Id: 9, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("v")}, ServerId: []byte("id")}}},
		&kvpb.Request{Id: 9, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{}}}},
		&kvpb.Response{Id: 9, Result: &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: 4, Evicted: 2}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, ok := parseGetRequest(b); ok {
			var full kvpb.Request
			if err := proto.Unmarshal(b, &full); err != nil {
				t.Fatalf("fast decoder accepted what proto refuses: %v", err)
			}
			g := full.GetGet()
			if g == nil || full.Id != r.id || !bytes.Equal(g.Key, r.key) || g.InlineMax != r.inlineMax || !bytes.Equal(g.ServerId, r.serverID) || g.Notify != r.notify {
				t.Fatalf("request: fast %+v, proto %v", r, &full)
			}
		}
		if r, ok := parseGetResponse(b); ok {
			var full kvpb.Response
			if err := proto.Unmarshal(b, &full); err != nil {
				t.Fatalf("fast decoder accepted what proto refuses: %v", err)
			}
			g := full.GetGet()
			if g == nil || full.Code != 0 || full.Id != r.id || g.Length != r.length || g.Version != r.version || g.Inline != r.inline || !bytes.Equal(g.Value, r.value) {
				t.Fatalf("response: fast %+v, proto %v", r, &full)
			}
		}
		if r, ok := parsePutRequest(b); ok {
			var full kvpb.Request
			if err := proto.Unmarshal(b, &full); err != nil {
				t.Fatalf("fast decoder accepted what proto refuses: %v", err)
			}
			p := full.GetPut()
			v, inline := p.GetSource().(*kvpb.PutRequest_Value)
			if p == nil || !inline || full.Id != r.id || !bytes.Equal(p.Key, r.key) || !bytes.Equal(v.Value, r.value) || !bytes.Equal(p.ServerId, r.serverID) {
				t.Fatalf("put request: fast %+v, proto %v", r, &full)
			}
		}
		if r, ok := parsePutResponse(b); ok {
			var full kvpb.Response
			if err := proto.Unmarshal(b, &full); err != nil {
				t.Fatalf("fast decoder accepted what proto refuses: %v", err)
			}
			p := full.GetPut()
			if p == nil || full.Code != 0 || full.Id != r.id || p.Version != r.version || p.Evicted != r.evicted {
				t.Fatalf("put response: fast %+v, proto %v", r, &full)
			}
		}
	})
}
