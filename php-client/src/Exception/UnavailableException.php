<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * The daemon answered but cannot take the request now: 429 QUEUE_FULL, 503 SHUTTING_DOWN or
 * STORE_UNAVAILABLE, any other 5xx, or an answer this client does not understand.
 */
final class UnavailableException extends \RuntimeException implements SidecarException
{
    private int $status;
    private ?string $errorCode;
    private ?int $retryAfter;

    public function __construct(string $message, int $status, ?string $errorCode = null, ?int $retryAfter = null)
    {
        parent::__construct($message, $status);
        $this->status = $status;
        $this->errorCode = $errorCode;
        $this->retryAfter = $retryAfter;
    }

    public function getStatus(): int
    {
        return $this->status;
    }

    /**
     * The daemon's error code, e.g. QUEUE_FULL; HTTP_<status> when the answer had none (something
     * else answered); null for a status() answer whose body was not JSON.
     */
    public function getErrorCode(): ?string
    {
        return $this->errorCode;
    }

    /** Seconds from the Retry-After header, if any. */
    public function getRetryAfter(): ?int
    {
        return $this->retryAfter;
    }
}
