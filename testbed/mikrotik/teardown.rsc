# Remove everything setup.rsc added (the management address on ether5 stays).
/queue tree remove [find name=ccs-bottleneck]
/queue type remove [find name=ccs-pfifo]
/ip firewall mangle remove [find comment="ccswitch: bottleneck"]
/interface bridge settings set use-ip-firewall=no
/interface wifi set [find default-name=wifi1] configuration="" disabled=yes
/interface wifi configuration remove [find name=ccs-cfg]
/interface wifi datapath remove [find name=ccs-dp]
/interface wifi channel remove [find name=ccs-ch]
/interface wifi security remove [find name=ccs-sec]
/ip dhcp-server network remove [find comment="ccswitch testbed"]
/ip dhcp-server remove [find name=ccs-dhcp]
/ip pool remove [find name=ccs-pool]
/ip address remove [find comment="ccswitch testbed"]
/interface bridge port remove [find bridge=ccs-br]
/interface bridge remove [find name=ccs-br]
:put "ccswitch testbed removed"
