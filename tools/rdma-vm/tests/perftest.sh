#!/bin/bash
# run inside tools/rdma-vm/rdma-vm: perftest loopback (server + client in the same VM)
# usage: perftest.sh DEV [extra perftest args]
DEV=${1:-rxe0}; shift
EXTRA=("$@")
GIDARG=(); [[ $DEV == rxe* ]] && GIDARG=(-x 1)
[[ $DEV == siw* ]] && GIDARG=(-R)   # iWARP: connection setup only via rdma_cm
IP=${RDMA_VM_IP:-10.0.0.1}
run() {
  local t=$1; shift
  echo "=== $t $* (dev $DEV)"
  $t -d $DEV "${GIDARG[@]}" "$@" "${EXTRA[@]}" >/tmp/srv.$$ 2>&1 &
  sleep 1
  timeout 120 $t -d $DEV "${GIDARG[@]}" "$@" "${EXTRA[@]}" $IP 2>&1 | grep -vE '^ *(local|remote) address' ; local rc=${PIPESTATUS[0]}
  wait
  [ $rc != 0 ] && { echo "--- server output:"; cat /tmp/srv.$$; }
  echo "=== rc=$rc"
}
run ib_write_bw -s 65536 -D 2
run ib_read_bw -s 65536 -D 2
run ib_send_bw -s 65536 -D 2
run ib_write_lat -s 8 -n 1000
run ib_read_lat -s 8 -n 1000
[[ $DEV == rxe* ]] && run ib_write_bw -s 65536 -D 2 -R
echo "=== rping (rdma_cm) 100 x 32 KiB"
rping -s -a $IP -C 100 -S 32768 >/tmp/rping.$$ 2>&1 &
sleep 1
/usr/bin/time -f "rping client wall %e s" rping -c -a $IP -C 100 -S 32768 -v | tail -2; echo "=== rc=${PIPESTATUS[0]}"
wait; cat /tmp/rping.$$; rm -f /tmp/rping.$$ /tmp/srv.$$
