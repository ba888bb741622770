package wsnode

// Request heads real clients send to /app/{key}, captured from a listener:
// pusher-js 8.6.0 under Node (the ws transport) and the same pusher-js URL
// opened by Chromium 156. The fuzz target starts from them; the front's
// tests upgrade them.
var realHeads = map[string]string{
	"pusher-js on Node": "GET /app/app-key?protocol=7&client=js&version=8.6.0&flash=false HTTP/1.1\r\n" +
		"Host: 127.0.0.1:38643\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: e4cLAJ0UHJlqSdKZZMoJRw==\r\nSec-WebSocket-Version: 13\r\n\r\n",
	"Chromium": "GET /app/app-key?protocol=7&client=js&version=8.6.0&flash=false HTTP/1.1\r\n" +
		"Host: 127.0.0.1:33239\r\nConnection: Upgrade\r\nPragma: no-cache\r\nCache-Control: no-cache\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36\r\n" +
		"Upgrade: websocket\r\nOrigin: http://127.0.0.1:33239\r\nSec-WebSocket-Version: 13\r\n" +
		"Accept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en-US,en;q=0.9\r\n" +
		"Sec-WebSocket-Key: hdq8rU+RlyjtIEbNFec9SQ==\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
}
