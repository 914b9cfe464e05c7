<?php

declare(strict_types=1);

namespace TransferSidecar;

/**
 * Job ids chosen by the client: 16 random bytes as base64url without padding (22 characters),
 * within the daemon's rule ^[A-Za-z0-9_-]{8,64}$. The same id is used for the socket and the
 * spool, so the daemon runs a job once however it arrived.
 */
final class JobId
{
    public const PATTERN = '/^[A-Za-z0-9_-]{8,64}$/D';

    public static function generate(): string
    {
        return rtrim(strtr(base64_encode(random_bytes(16)), '+/', '-_'), '=');
    }

    public static function isValid(string $id): bool
    {
        return preg_match(self::PATTERN, $id) === 1;
    }
}
