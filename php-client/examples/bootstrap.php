<?php

declare(strict_types=1);

// Autoloading for the examples (Composer's when installed, else a PSR-4 fallback), and a factory
// for the Client configured from the environment:
//   SIDECAR_SOCKET (unix socket) or SIDECAR_HOST/SIDECAR_PORT (default 127.0.0.1:8765),
//   SIDECAR_HANDOFF_SOCKET (the daemon's handoff.listen socket, for job lines), SIDECAR_TOKEN,
//   SIDECAR_SPOOL.
// `persistent`: under php-fpm each worker keeps its connection to the daemon from one request to
// the next (see the client's README).

use TransferSidecar\Client;

if (is_file(__DIR__ . '/../vendor/autoload.php')) {
    require_once __DIR__ . '/../vendor/autoload.php';
} elseif (!class_exists(Client::class)) {
    spl_autoload_register(static function (string $class): void {
        if (str_starts_with($class, 'TransferSidecar\\')) {
            $file = __DIR__ . '/../src/' . str_replace('\\', '/', substr($class, strlen('TransferSidecar\\'))) . '.php';
            if (is_file($file)) {
                require $file;
            }
        }
    });
}

return static function (): Client {
    $env = static fn (string $name): ?string => ($v = getenv($name)) === false || $v === '' ? null : $v;
    $options = ['token' => $env('SIDECAR_TOKEN'), 'spool' => $env('SIDECAR_SPOOL'), 'persistent' => true,
        'handoff_socket' => $env('SIDECAR_HANDOFF_SOCKET')];
    if ($env('SIDECAR_SOCKET') !== null) {
        $options['socket'] = $env('SIDECAR_SOCKET');
    } else {
        $options['host'] = $env('SIDECAR_HOST') ?? '127.0.0.1';
        $options['port'] = (int) ($env('SIDECAR_PORT') ?? 8765);
    }
    return new Client($options);
};
