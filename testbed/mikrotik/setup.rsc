# ccswitch testbed on a MikroTik hAP ax3 (RouterOS v7.13 or later, `wifi-qcom`
# package, /interface wifi).  Paper 002, section 5.1 and Table 4: two Linux
# clients on WiFi, one Linux server on Ethernet, a 100 Mbit/s bottleneck with a
# 50-packet pfifo on the way to the server.
#
#   client 1 ~~WiFi 5 GHz~~ \
#                            wifi1 --- bridge ccs-br --- ether2 ==== server 10.99.0.1
#   client 2 ~~WiFi 5 GHz~~ /          10.99.0.254         (queue tree ccs-bottleneck:
#                                      DHCP .11-.50         100M, pfifo 50, toward the server)
#   management: ether5 192.168.88.1/24
#
# Start from an empty configuration, then import this file:
#   /system reset-configuration no-defaults=yes skip-backup=yes
#   (reconnect with WinBox by MAC address, upload setup.rsc in Files)
#   /import file-name=setup.rsc
# Edit the values below first.  RouterOS 7.12 or older (wifiwave2 package): replace
# "/interface wifi" with "/interface wifiwave2" throughout.

:global ccsSsid "ccswitch-testbed"
:global ccsPassphrase "change-this-passphrase"
:global ccsCountry "australia"
:global ccsFrequency 5180
:global ccsWidth "20/40/80mhz"
:global ccsRate "100M"
:global ccsLimit 50
:global ccsServer "10.99.0.1"

/system identity set name=ccs-router

# --- management port (kept out of the experiment) -------------------------
/ip address add address=192.168.88.1/24 interface=ether5 comment="ccswitch: management"

# --- one bridge: WiFi clients and the server share 10.99.0.0/24 -----------
# protocol-mode=none: no STP delays; fast-forward=no and hw=no keep every
# frame on the CPU path, where the queue below is applied.
/interface bridge add name=ccs-br protocol-mode=none fast-forward=no comment="ccswitch testbed"
/interface bridge port add bridge=ccs-br interface=ether2 hw=no comment="ccswitch: server"
/ip address add address=10.99.0.254/24 interface=ccs-br comment="ccswitch testbed"
/ip pool add name=ccs-pool ranges=10.99.0.11-10.99.0.50
/ip dhcp-server add name=ccs-dhcp interface=ccs-br address-pool=ccs-pool lease-time=1d
/ip dhcp-server network add address=10.99.0.0/24 gateway=10.99.0.254 dns-none=yes comment="ccswitch testbed"

# --- WiFi: one fixed 5 GHz 802.11ax channel, WPA2/WPA3-PSK, 2.4 GHz off ----
# A fixed channel (no DFS, no automatic channel changes) keeps runs comparable.
/interface wifi security add name=ccs-sec authentication-types=wpa2-psk,wpa3-psk passphrase=$ccsPassphrase
/interface wifi channel add name=ccs-ch band=5ghz-ax frequency=$ccsFrequency width=$ccsWidth skip-dfs-channels=all
/interface wifi datapath add name=ccs-dp bridge=ccs-br
/interface wifi configuration add name=ccs-cfg mode=ap ssid=$ccsSsid country=$ccsCountry \
    security=ccs-sec channel=ccs-ch datapath=ccs-dp
/interface wifi set [find default-name=wifi1] configuration=ccs-cfg disabled=no
/interface wifi set [find default-name=wifi2] disabled=yes

# --- the bottleneck: 100 Mbit/s, pfifo of 50 packets, toward the server ----
# Bridged traffic goes through the IP firewall (use-ip-firewall) so that a
# mangle rule can mark it; the queue tree on the global HTB then shapes the
# marked packets to max-limit with a plain FIFO of ccsLimit packets (tail drop),
# like the emulated link's uplink { rate_mbit = 100, qdisc = pfifo 50 }.
/interface bridge settings set use-ip-firewall=yes
/ip firewall mangle add chain=forward dst-address=$ccsServer action=mark-packet \
    new-packet-mark=ccs-to-server passthrough=no comment="ccswitch: bottleneck"
/queue type add name=ccs-pfifo kind=pfifo pfifo-limit=$ccsLimit
/queue tree add name=ccs-bottleneck parent=global packet-mark=ccs-to-server max-limit=$ccsRate \
    queue=ccs-pfifo comment="ccswitch: bottleneck toward the server"

# --- time for the hosts (they start together with --start-at) --------------
/system ntp server set enabled=yes use-local-clock=yes

:put "ccswitch testbed configured: SSID $ccsSsid on $ccsFrequency MHz, bottleneck $ccsRate pfifo $ccsLimit toward $ccsServer"
