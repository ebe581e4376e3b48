# What the router saw (run before and after a scenario):
#   /import file-name=stats.rsc
# or, from a host, once a second during a run:
#   while sleep 1; do ssh admin@10.99.0.254 ':put [/queue tree get [find name=ccs-bottleneck] dropped]'; done

/queue tree print stats without-paging where name=ccs-bottleneck
/interface wifi registration-table print detail without-paging
/interface bridge host print without-paging where bridge=ccs-br
