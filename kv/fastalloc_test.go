package kv

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer/kv/kvpb"
)

// TestFastAllocs: the hand-written decoders and encoders of the hot
// messages do not allocate.
func TestFastAllocs(t *testing.T) {
	b, _ := proto.Marshal(&kvpb.Response{Id: 7, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: 3, Version: 9, Inline: true, Value: []byte("abc")}}})
	q, _ := proto.Marshal(&kvpb.Request{Id: 7, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), InlineMax: 5, ServerId: []byte("x")}}})
	pq, _ := proto.Marshal(&kvpb.Request{Id: 8, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("v")}, ServerId: []byte("x")}}})
	pr, _ := proto.Marshal(&kvpb.Response{Id: 8, Result: &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: 3, Evicted: 1}}})
	out := make([]byte, 0, 256)
	key, value := []byte("key"), make([]byte, 100)
	if n := testing.AllocsPerRun(100, func() {
		parseGetResponse(b)
		parseGetRequest(q)
		parsePutRequest(pq)
		parsePutResponse(pr)
		appendGetRequest(out, 1, key, key, 5, key)
		appendGetResponse(out, 1, 100, 2, true, value)
		appendPutRequest(out, 1, key, value, key)
		appendPutResponse(out, 1, 2, 3)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}
