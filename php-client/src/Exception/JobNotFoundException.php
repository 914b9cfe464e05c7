<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * 404: the daemon has no job with that id (never submitted, or pruned after its retention).
 */
final class JobNotFoundException extends RequestException
{
}
