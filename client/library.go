package client

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/lua"
)

// DeleteLibraries deletes the editions of the FUNCTION library that other
// versions of this client loaded (lua.Versioned: "ratelimit_v0_1_0_…"),
// on every primary of a Cluster, every shard of a Ring, or the one server,
// and returns their names as "address name" (sorted). This version's
// edition stays, and so does any other library: lua/ratelimit.lua loaded by
// hand ("ratelimit") is not the client's to delete.
//
// Each version of the client loads its own edition and never replaces
// another's, so a rolling deploy runs each process's own code; the old
// editions stay until deleted. Run this once every process runs the new
// version. A process of an old version still running is not broken by it:
// its next call finds its functions gone and loads its edition again.
func (c *Client) DeleteLibraries(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var deleted []string
	var errs []error
	each := func(ctx context.Context, server *redis.Client) error {
		names, err := deleteLibraries(ctx, server)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			deleted = append(deleted, server.Options().Addr+" "+n)
		}
		if err != nil {
			errs = append(errs, err)
		}
		return nil
	}
	var err error
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = r.ForEachShard(ctx, each)
	case *redis.Client:
		err = each(ctx, r)
	default:
		return nil, errors.New("ratelimit: DeleteLibraries needs a *redis.Client, *redis.ClusterClient or *redis.Ring")
	}
	sort.Strings(deleted)
	return deleted, errors.Join(append(errs, err)...)
}

// deleteLibraries deletes one server's editions of other versions.
func deleteLibraries(ctx context.Context, server *redis.Client) ([]string, error) {
	libs, err := server.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: lua.LibraryName + "_v*"}).Result()
	if err != nil {
		return nil, err
	}
	mine := lua.Versioned().Name
	var deleted []string
	for _, l := range libs {
		if !strings.HasPrefix(l.Name, lua.LibraryName+"_v") || l.Name == mine {
			continue
		}
		if err := server.FunctionDelete(ctx, l.Name).Err(); err != nil {
			return deleted, err
		}
		deleted = append(deleted, l.Name)
	}
	return deleted, nil
}
