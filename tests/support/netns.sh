# shellcheck shell=bash
# netns.sh: machines of their own for the partition spec (source it, or run
# it as `bash tests/support/netns.sh FUNCTION ARGS...`).  Root only.
#
# durable_netns_up N     a network namespace durable-N with one veth link to
#                        this one: 10.77.N.1 here, 10.77.N.2 there
# durable_netns_cut N    cut that link: both ends drop every packet for the
#                        other (blackhole routes), as a partition does -- no
#                        reset, no error, only silence
# durable_netns_heal N   undo the cut
# durable_netns_down N   remove the namespace and its link
#
# N is 1..254; everything made is named after it, so several namespaces can
# live side by side, and down removes only what up made.

durable_netns_up() {
  local n=$1 ns=durable-$1
  ip netns add "$ns" || return 1
  ip link add "dn$n-a" type veth peer name "dn$n-b" netns "$ns" || return 1
  ip addr add "10.77.$n.1/24" dev "dn$n-a"
  ip link set "dn$n-a" up
  ip -n "$ns" addr add "10.77.$n.2/24" dev "dn$n-b"
  ip -n "$ns" link set "dn$n-b" up
  ip -n "$ns" link set lo up
}

durable_netns_cut() {
  local n=$1
  ip -n "durable-$n" route add blackhole "10.77.$n.1/32" &&
    ip route add blackhole "10.77.$n.2/32"
}

durable_netns_heal() {
  local n=$1
  ip -n "durable-$n" route del blackhole "10.77.$n.1/32" 2>/dev/null
  ip route del blackhole "10.77.$n.2/32" 2>/dev/null
  return 0
}

durable_netns_down() {
  local n=$1
  durable_netns_heal "$n"
  ip link del "dn$n-a" 2>/dev/null
  ip netns del "durable-$n" 2>/dev/null
  return 0
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  "$@"
fi
