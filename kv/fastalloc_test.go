package kv

import (
	"github.com/xferio/xfer/kv/kvpb"
	"google.golang.org/protobuf/proto"
	"testing"
)

func TestFastAllocs(t *testing.T) {
	b, _ := proto.Marshal(&kvpb.Response{Id: 7, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: 3, Version: 9, Inline: true, Value: []byte("abc")}}})
	q, _ := proto.Marshal(&kvpb.Request{Id: 7, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), InlineMax: 5, ServerId: []byte("x")}}})
	if n := testing.AllocsPerRun(100, func() { parseGetResponse(b); parseGetRequest(q) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}
