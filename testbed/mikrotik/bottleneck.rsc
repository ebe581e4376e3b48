# Change the bottleneck without touching the rest (after setup.rsc):
#   /import file-name=bottleneck.rsc
# e.g. for a 50 Mbit/s link with a 100-packet FIFO, edit the two values first.

:global ccsRate "100M"
:global ccsLimit 50

/queue type set [find name=ccs-pfifo] pfifo-limit=$ccsLimit
/queue tree set [find name=ccs-bottleneck] max-limit=$ccsRate
/queue tree reset-counters [find name=ccs-bottleneck]
:put "bottleneck: $ccsRate, pfifo $ccsLimit"
