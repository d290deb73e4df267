// Command etcd is etcd v3.6's server: the same entry point as go.etcd.io/etcd's main.go
// (etcdmain.Main(os.Args)), built here from the published server/v3 module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
