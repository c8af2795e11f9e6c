#!/bin/bash
# run inside tools/rdma-vm/rdma-vm: ibv_rc_pingpong server+client on the same device
DEV=${1:-rxe0}
GID=${GID:-1}
ibv_devinfo -d $DEV
ibv_devinfo -d $DEV -v | grep -E 'GID|max_qp:|max_mr_size|max_qp_wr'
ibv_rc_pingpong -d $DEV -g $GID -n 1000 -s 4096 >/tmp/pp-srv.$$ 2>&1 &
sleep 1
ibv_rc_pingpong -d $DEV -g $GID -n 1000 -s 4096 127.0.0.1; rc=$?
wait; cat /tmp/pp-srv.$$; rm -f /tmp/pp-srv.$$
exit $rc
