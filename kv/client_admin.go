package kv

import (
	"context"

	"github.com/xferio/xfer/kv/kvpb"
)

// Stats returns the server's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var st Stats
	err := c.retry(ctx, func(*session) error {
		resp, err := c.rpc.Stats(ctx, &kvpb.StatsRequest{}, c.waitOpt)
		if err == nil {
			st = statsFromProto(resp)
		}
		return err
	})
	return st, c.bounded(ctx, "stats", err)
}
