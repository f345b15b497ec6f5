//! btl over OS sockets.
