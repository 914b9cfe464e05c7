<?php

declare(strict_types=1);

// PSR-4 autoloading for the library and its tests without Composer (PHPUnit comes from Debian's
// phpunit package here). With Composer, vendor/autoload.php does the same.
if (is_file(__DIR__ . '/../vendor/autoload.php')) {
    require __DIR__ . '/../vendor/autoload.php';
    return;
}

spl_autoload_register(static function (string $class): void {
    $prefixes = [
        'TransferSidecar\\Tests\\' => __DIR__ . '/',
        'TransferSidecar\\' => __DIR__ . '/../src/',
    ];
    foreach ($prefixes as $prefix => $dir) {
        if (str_starts_with($class, $prefix)) {
            $file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
            if (is_file($file)) {
                require $file;
            }
            return;
        }
    }
});
