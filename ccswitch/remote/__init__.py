"""Remote control (issue 15, paper 003): the policy server, its protocol and clients.

protocol.py  the datagram format, HMAC, replay window, checks
agents.py    what the server decides with (cwnd agents, the DQN)
server.py    `ccswitch policy serve` (asyncio UDP, batching, deadlines)
client.py    ask with a deadline, fall back locally, never raise
sender.py    the `remote` CC's control loop on the sender (bpf/remote.*)
cli.py       the click command
"""
