"""The replica hosts' data port: the TCP path that carries produce requests, follower fetches
and consumer fetches between processes, msgpack frames with a length in front, instead of a
Ray actor call each.

`frames` is the sans-I/O codec (every request and answer, checked field by field, and the
hello that carries the host's token); `server` the port a replica host listens on
(`DataPort`); `async_client` the clients on an event loop (a broker's Kafka listener's
`HostConnections`, a follower host's `LeaderConnection`); `blocking_client` the producers' and
consumers' `TcpCalls`; `ray_calls` the other transport, an actor call each (`RayCalls`); and
`calls` the interface both client transports keep, and `host_calls`, which picks one.
"""
