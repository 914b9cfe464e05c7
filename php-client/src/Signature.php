<?php

declare(strict_types=1);

namespace TransferSidecar;

/**
 * Completion callbacks from the daemon carry
 *   X-Sidecar-Timestamp: <unix seconds>
 *   X-Sidecar-Signature: sha256=<hex HMAC-SHA256(secret, timestamp . "." . body)>
 * verify() checks both: the signature in constant time, the timestamp against replays.
 */
final class Signature
{
    /** The X-Sidecar-Signature value for a body sent at $timestamp. */
    public static function sign(string $body, #[\SensitiveParameter] string $secret, int $timestamp): string
    {
        return 'sha256=' . hash_hmac('sha256', $timestamp . '.' . $body, $secret);
    }

    /**
     * @param string $body            the raw request body (file_get_contents('php://input'))
     * @param string $timestamp       X-Sidecar-Timestamp
     * @param string $signatureHeader X-Sidecar-Signature; several comma-separated values are
     *                                accepted (any may match), for secret rotation
     */
    public static function verify(
        string $body,
        string $timestamp,
        string $signatureHeader,
        #[\SensitiveParameter] string $secret,
        int $toleranceSeconds = 300,
        ?int $now = null
    ): bool {
        if ($secret === '' || preg_match('/^[0-9]{1,12}$/D', $timestamp) !== 1) {
            return false;
        }
        $now ??= time();
        if (abs($now - (int) $timestamp) > $toleranceSeconds) {
            return false;
        }
        $expected = self::sign($body, $secret, (int) $timestamp);
        $valid = false;
        foreach (explode(',', $signatureHeader) as $candidate) {
            // no early exit: the time taken does not depend on which candidate matched
            $valid = hash_equals($expected, strtolower(trim($candidate))) || $valid;
        }
        return $valid;
    }
}
